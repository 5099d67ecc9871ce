#!/usr/bin/env bash
# Makes sure PostgreSQL's server programs (initdb, pg_ctl, postgres) are on this machine for the
# tests that start a throwaway cluster (testing/postgres.rs), and prints their directory on its
# last line. Installs Debian's `postgresql` package when they are missing (as root, with
# apt-get); it never starts or enables a system service: each test starts its own cluster in a
# temporary directory and removes it.
#
# Looks in $MAI_PG_BIN, then /usr/lib/postgresql/<newest>/bin (Debian's layout), then PATH.
# Used by .ci/run; testing/postgres.rs looks in the same places.
set -euo pipefail

# Prints the directory holding initdb, pg_ctl and postgres; fails when there is none.
find_bin() {
  local dir
  for dir in "${MAI_PG_BIN:-}" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  local initdb
  initdb="$(command -v initdb 2>/dev/null)" || return 1
  # Follow a symbolic link (some machines link Debian's programs into /usr/local/bin).
  dir="$(dirname "$(readlink -f "$initdb")")"
  [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] && echo "$dir"
}

if bin="$(find_bin)"; then
  echo "$bin"
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL's server programs (initdb, pg_ctl) are missing and this is not a root Debian \
shell that could install them: install PostgreSQL (Debian: apt-get install postgresql) or set \
MAI_PG_BIN to the directory holding initdb" >&2
  exit 1
fi

echo "installing Debian's postgresql package (no service is started)" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d: keep the package's post-install step from starting a system cluster.
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
status=0
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >&2; } || status=$?
[ -n "$made_policy" ] && rm -f "$policy"
if [ "$status" != 0 ]; then
  echo "apt-get could not install postgresql (exit $status); see its messages above" >&2
  exit 1
fi
if bin="$(find_bin)"; then
  echo "$bin"
  exit 0
fi
echo "the postgresql package is installed but initdb is still not found" >&2
exit 1
