#!/usr/bin/env bash
# Installs the real MCP peers the integration tests talk to, into a cache outside the clone, and
# prints that directory on its last line. Idempotent: once installed (a stamp per pinned version),
# a run only refreshes the two scripts and takes well under a second.
#
#   node/   the MCP reference servers from npm: server-everything and server-filesystem
#   venv/   the official Python MCP SDK from PyPI (and uvicorn, for paged_server.py over HTTP)
#   mcp_probe.py, paged_server.py   copied from this directory
#
# Needs: npm (Node.js >= 18) and python3 with venv, and network access to npm and PyPI the first
# time. Environment: MAI_PEERS_DIR (default $HOME/.cache/mai-agent-peers).
# Used by testing/peers.rs (every test that needs a peer runs it) and by .ci/run.
set -euo pipefail

NODE_PEERS_VERSION=2026.8.31
PYTHON_SDK_VERSION=2.3.0

dir="${MAI_PEERS_DIR:-$HOME/.cache/mai-agent-peers}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="$dir/setup.log"
mkdir -p "$dir"

# Prints the last lines of the log and what failed, then exits non-zero.
failed() {
  tail -20 "$log" >&2 || true
  echo "$1; the full log is $log" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "cannot install the MCP peers: '$1' is not installed ($2)" >&2
    exit 1
  }
}

node_stamp="$dir/node/.installed-$NODE_PEERS_VERSION"
if [ ! -f "$node_stamp" ] || [ ! -x "$dir/node/node_modules/.bin/mcp-server-everything" ] \
  || [ ! -x "$dir/node/node_modules/.bin/mcp-server-filesystem" ]; then
  need npm "install Node.js 18 or newer, which brings npm"
  echo "installing the MCP reference servers $NODE_PEERS_VERSION from npm into $dir/node" >&2
  npm install --silent --no-audit --no-fund --prefix "$dir/node" \
    "@modelcontextprotocol/server-everything@$NODE_PEERS_VERSION" \
    "@modelcontextprotocol/server-filesystem@$NODE_PEERS_VERSION" >>"$log" 2>&1 \
    || failed "npm install of the MCP reference servers failed"
  touch "$node_stamp"
fi

venv_stamp="$dir/venv/.installed-mcp-$PYTHON_SDK_VERSION"
# (The import is checked once, at install: it costs a second or two.)
if [ ! -f "$venv_stamp" ] || [ ! -x "$dir/venv/bin/python" ]; then
  need python3 "install Python 3.10 or newer with its venv module"
  echo "installing the Python MCP SDK $PYTHON_SDK_VERSION from PyPI into $dir/venv" >&2
  python3 -m venv "$dir/venv" >>"$log" 2>&1 || failed "python3 -m venv failed (is python3-venv installed?)"
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check \
    "mcp==$PYTHON_SDK_VERSION" uvicorn >>"$log" 2>&1 \
    || failed "pip install mcp==$PYTHON_SDK_VERSION failed"
  "$dir/venv/bin/python" -c 'import mcp, uvicorn' >>"$log" 2>&1 \
    || failed "the Python MCP SDK is installed in $dir/venv but does not import; delete $dir/venv and rerun"
  touch "$venv_stamp"
fi

cp "$here/mcp_probe.py" "$here/paged_server.py" "$dir/"
echo "$dir"
