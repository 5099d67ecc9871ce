#!/usr/bin/env bash
# Installs the real browser the dashboard tests drive — Debian's headless-capable Chromium and its
# WebDriver (`chromium`, `chromium-driver`) — when either is missing, and prints the chromedriver
# path on its last line. Idempotent: once installed it only checks and takes well under a second.
#
# Needs: apt-get and root (CI runs as root), and network access to Debian's mirrors the first
# time. Elsewhere install them yourself (`sudo apt-get install chromium chromium-driver`) or point
# MAI_CHROMEDRIVER at a chromedriver and MAI_CHROMIUM at a matching Chromium.
# Used by testing/browser.rs (every dashboard test runs it) and by .ci/run.
set -euo pipefail

log="${TMPDIR:-/tmp}/mai-agent-browser-setup.log"
driver="${MAI_CHROMEDRIVER:-$(command -v chromedriver || true)}"
chromium="${MAI_CHROMIUM:-$(command -v chromium || true)}"

if [ -z "$driver" ] || [ -z "$chromium" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "cannot install Chromium: not root; run 'sudo apt-get install chromium chromium-driver'" >&2
    exit 1
  fi
  command -v apt-get >/dev/null 2>&1 || {
    echo "cannot install Chromium: no apt-get; install Chromium and its chromedriver with your package manager" >&2
    exit 1
  }
  echo "installing chromium and chromium-driver from Debian (log: $log)" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq chromium chromium-driver >>"$log" 2>&1; then
    # A fresh machine has no package lists yet.
    apt-get update -qq >>"$log" 2>&1 || true
    apt-get install -y -qq chromium chromium-driver >>"$log" 2>&1 || {
      tail -20 "$log" >&2
      echo "apt-get install chromium chromium-driver failed; the full log is $log" >&2
      exit 1
    }
  fi
  driver="$(command -v chromedriver)"
  chromium="$(command -v chromium)"
fi

"$driver" --version >&2 || {
  echo "chromedriver at $driver does not run" >&2
  exit 1
}
echo "$chromium"
echo "$driver"
