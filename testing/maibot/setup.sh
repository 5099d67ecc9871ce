#!/usr/bin/env bash
# Installs a real MaiBot for the end-to-end test (crates/mai-agent/tests/maibot.rs), idempotently:
# a Python >= 3.12 venv under ${MAI_MAIBOT_DIR:-$HOME/.cache/mai-agent-maibot} with PyPI `maibot`
# at the tested version (it brings maim_message, tomlkit and websockets, which harness.py uses).
# Prints the directory on its last line; the venv's python is DIR/venv/bin/python.
#
# Needs: python3.12 or newer (found as $MAI_MAIBOT_PYTHON, python3.13, python3.12, or a pyenv
# 3.12+), and network access to PyPI the first time (a few minutes); later runs take a second.
# It owns only that directory; it never touches the clone.
set -euo pipefail

VERSION="${MAI_MAIBOT_VERSION:-1.3.15}"
DIR="${MAI_MAIBOT_DIR:-$HOME/.cache/mai-agent-maibot}"
VENV="$DIR/venv"
STAMP="$VENV/.mai-agent-maibot-$VERSION"

installed() {
  [ -f "$STAMP" ] && "$VENV/bin/python" -c 'import maim_message, tomlkit, websockets, src.cli.tool' \
    >/dev/null 2>&1
}

python_312() {
  local candidate
  # 3.12 first: the version MaiBot is tested with here.
  for candidate in "${MAI_MAIBOT_PYTHON:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python \
    python3.13 "$HOME"/.pyenv/versions/3.13*/bin/python python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || [ -x "$candidate" ] || continue
    if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

mkdir -p "$DIR"
if ! installed; then
  # An install another process finished (its log ends with "exit 0") only lacks the stamp.
  # (The output is captured first: `grep -q` closing the pipe early would fail under pipefail.)
  shown="$("$VENV/bin/python" -m pip show maibot 2>/dev/null || true)"
  if [ -x "$VENV/bin/python" ] && grep -qx "Version: $VERSION" <<<"$shown"; then
    echo "reusing the maibot $VERSION already installed in $VENV" >&2
  else
    if ! PY="$(python_312)"; then
      echo "cannot install MaiBot: it needs Python >= 3.12 and none was found (tried" \
        "\$MAI_MAIBOT_PYTHON, python3.12, python3.13, ~/.pyenv/versions/3.1[23]*, python3)." \
        "Install Python 3.12 (e.g. 'pyenv install 3.12') or set MAI_MAIBOT_PYTHON." >&2
      exit 1
    fi
    echo "installing maibot $VERSION into $VENV with $PY (a few minutes the first time)" >&2
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "maibot==$VERSION" \
      >"$DIR/install.log" 2>&1 || {
      echo "exit $?" >>"$DIR/install.log"
      tail -20 "$DIR/install.log" >&2
      echo "pip install maibot==$VERSION failed; the full log is $DIR/install.log" >&2
      exit 1
    }
    echo "exit 0" >>"$DIR/install.log"
  fi
  touch "$STAMP"
  installed || {
    echo "maibot $VERSION is installed in $VENV but does not import; delete $VENV and rerun" >&2
    exit 1
  }
fi
echo "$DIR"
