#!/usr/bin/env bash
# Benchmark (b) side by side with the original implementation, interleaved on this machine.
#
# The original is oh-mai-agent (github.com/Dreamwxz/oh-mai-agent) at commit $OMA_COMMIT; its
# harness is vendored in testing/bench/original/. Everything is set up OUTSIDE the repo, under
# $OMA_HOME (default $HOME/.cache/mai-agent-original):
#   $OMA_HOME/src-<commit>  the original's source (unless OMA_SRC names a checkout)
#   $OMA_HOME/bench         a copy of the harness with its venv (PyPI packages, as the original's
#                           test suite needs them)
# Then it runs REPS (default 3) repetitions of, in turn: the original's `bench.py b` and our
# `loadgen http --instant-model` (release build); with --http, our `loadgen http` too (the same
# workload through OpenAiClient to a fake server over loopback HTTP). It prints every figure,
# the medians and the ratio ours / original: only figures measured side by side count, as the
# machine's speed drifts by hour.
#
# Where the original comes from, first that applies:
#   OMA_SRC=<dir>            a checkout or unpacked archive of the original (used as it is)
#   OMA_TARBALL=<file>       a `git archive` .tar.gz of it (e.g. GitHub's tarball of the commit)
#   otherwise                downloaded from GitHub (codeload tarball of $OMA_COMMIT, else
#                            `git clone`); offline, the script stops and says to set one of the
#                            two above.
# Tests and CI never run this script; it needs no network when OMA_SRC or OMA_TARBALL is given
# and the venv exists (creating the venv needs PyPI).
#
# LOADGEN=<binary> uses an already built `loadgen` example (release) instead of building one.
#
# Usage: testing/bench/compare-original.sh [--http] [--reps N]
set -euo pipefail

OMA_COMMIT=072aefa902958adf741d49bac28a8c7cbb035888
OMA_REPO=Dreamwxz/oh-mai-agent
OMA_HOME=${OMA_HOME:-$HOME/.cache/mai-agent-original}
repo=$(cd "$(dirname "$0")/../.." && pwd)
reps=${REPS:-3}
with_http=0
while [ $# -gt 0 ]; do
  case $1 in
    --http) with_http=1 ;;
    --reps) reps=$2; shift ;;
    *) echo "unknown argument $1; usage: $0 [--http] [--reps N]" >&2; exit 2 ;;
  esac
  shift
done

say() { echo "compare-original: $*" >&2; }
die() { say "$*"; exit 1; }

# The commit a `git archive` tarball was made from (its pax header's comment), or nothing.
archive_commit() {
  gzip -dc "$1" 2>/dev/null | head -c 1024 | tr -c '[:print:]' '\n' |
    sed -n 's/^[0-9]* *comment=\([0-9a-f]\{40\}\)$/\1/p' | head -1 || true # gzip stops early
}

unpack() { # tarball → dir
  local commit; commit=$(archive_commit "$1")
  if [ -n "$commit" ] && [ "$commit" != "$OMA_COMMIT" ]; then
    say "warning: $1 is an archive of commit $commit, not $OMA_COMMIT"
  fi
  rm -rf "$2.partial"; mkdir -p "$2.partial"
  tar -xzf "$1" -C "$2.partial" --strip-components=1
  mv "$2.partial" "$2"
}

# Prints the directory of the original's source, fetching it if it must.
original_source() {
  if [ -n "${OMA_SRC:-}" ]; then
    [ -f "$OMA_SRC/plugin.py" ] || die "OMA_SRC=$OMA_SRC holds no plugin.py: not the original's source"
    echo "$OMA_SRC"; return
  fi
  local dir=$OMA_HOME/src-$OMA_COMMIT
  if [ ! -f "$dir/plugin.py" ]; then
    rm -rf "$dir"
    if [ -n "${OMA_TARBALL:-}" ]; then
      [ -f "$OMA_TARBALL" ] || die "OMA_TARBALL=$OMA_TARBALL does not exist"
      unpack "$OMA_TARBALL" "$dir"
    else
      download "$dir"
    fi
  fi
  [ -f "$dir/plugin.py" ] || die "$dir holds no plugin.py: not the original's source; remove it and retry"
  echo "$dir"
}

download() { # dir
  local tarball=$OMA_HOME/oh-mai-agent-$OMA_COMMIT.tar.gz
  local url=https://codeload.github.com/$OMA_REPO/tar.gz/$OMA_COMMIT
  say "downloading the original: $url"
  if curl -fsSL --connect-timeout 15 -o "$tarball.partial" "$url"; then
    mv "$tarball.partial" "$tarball"; unpack "$tarball" "$1"; return
  fi
  rm -f "$tarball.partial"
  say "download failed; trying git clone https://github.com/$OMA_REPO"
  if GIT_TERMINAL_PROMPT=0 git clone -q "https://github.com/$OMA_REPO" "$1.partial" 2>/dev/null &&
    git -C "$1.partial" checkout -q "$OMA_COMMIT"; then
    mv "$1.partial" "$1"; return
  fi
  rm -rf "$1.partial"
  die "cannot fetch the original ($OMA_REPO at $OMA_COMMIT): this machine seems offline.
  Give a local copy instead: OMA_SRC=<checkout of that commit> or OMA_TARBALL=<its git archive .tar.gz>"
}

# Copies the harness to $OMA_HOME/bench and makes its venv (once).
harness() {
  local bench=$OMA_HOME/bench
  mkdir -p "$bench"
  cp "$repo"/testing/bench/original/*.py "$bench/"
  if [ ! -x "$bench/venv/bin/python" ]; then
    say "creating the harness's venv in $bench/venv (packages from PyPI)"
    rm -rf "$bench/venv"
    python3 -m venv "$bench/venv"
    "$bench/venv/bin/pip" install -q pytest pytest-asyncio maibot-plugin-sdk croniter jinja2 \
      tiktoken bpe-openai "mcp<2" mcp-server-fetch ||
      { rm -rf "$bench/venv"; die "pip could not install the harness's packages (offline?)"; }
  fi
  echo "$bench"
}

# Builds our load generator (release) and prints its path; LOADGEN=<binary> skips the build.
loadgen() {
  if [ -n "${LOADGEN:-}" ]; then
    [ -x "$LOADGEN" ] || die "LOADGEN=$LOADGEN is not an executable"
    echo "$LOADGEN"; return
  fi
  (cd "$repo" && cargo build -q --release -p mai-engine --example loadgen) >&2 ||
    die "cargo could not build the load generator"
  # A copy, so another build into the same target dir cannot swap it between repetitions.
  cp "${CARGO_TARGET_DIR:-$repo/target}/release/examples/loadgen" "$OMA_HOME/loadgen"
  echo "$OMA_HOME/loadgen"
}

# One repetition of the original's (b): its agent tasks per second.
original_b() { # src bench rep
  local out
  out=$(cd "$2" && OMA_SRC=$1 venv/bin/python bench.py b --rep "$3") ||
    die "the original's bench.py b failed (rep $3)"
  python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
# The original's scheduler can start a task twice (its 1 Hz orphan pickup races with
# create_task), which shows as extra tool calls or a row left behind; the run still counts, as in
# the harness's own summaries, but is noted.
checks = {"db_completed": 404, "db_failed": 0, "llm_tool_calls": 1200}
off = {k: r[k] for k, want in checks.items() if r[k] != want}
if off:
    print(f"compare-original: note: the original's run differs from {checks}: {off} "
          "(its scheduler started a task twice)", file=sys.stderr)
print("%.1f" % r["agent_tasks_per_s"])
PY
}

# One run of our (b): the figure of its "N tasks/s to the last completion" line.
ours_b() { # loadgen [flags…]
  local bin=$1 out figure; shift
  out=$("$bin" http "$@") || die "our loadgen http $* failed"
  figure=$(sed -n 's/.* \([0-9][0-9]*\) tasks\/s to the last completion.*/\1/p' <<<"$out")
  [ -n "$figure" ] || die "our loadgen http $* printed no \"N tasks/s to the last completion\": $out"
  echo "$figure"
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

main() {
  local src bench bin
  src=$(original_source)
  bench=$(harness)
  bin=$(loadgen)
  say "original: $src; harness: $bench; ours: $bin; $reps interleaved repetitions"
  local orig=() inst=() http=() rep line
  for rep in $(seq 1 "$reps"); do
    orig+=("$(original_b "$src" "$bench" "$rep")")
    inst+=("$(ours_b "$bin" --instant-model)")
    line="rep $rep: original ${orig[-1]} tasks/s; ours (instant model) ${inst[-1]} tasks/s"
    if [ "$with_http" = 1 ]; then
      http+=("$(ours_b "$bin")")
      line+="; ours over HTTP ${http[-1]} tasks/s"
    fi
    echo "$line  (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
  local mo mi; mo=$(median "${orig[@]}"); mi=$(median "${inst[@]}")
  echo "medians: original $mo tasks/s; ours (instant model) $mi tasks/s: ours / original = $(awk -v a="$mi" -v b="$mo" 'BEGIN {printf "%.1f", a/b}')×"
  if [ "$with_http" = 1 ]; then
    local mh; mh=$(median "${http[@]}")
    echo "medians: ours over HTTP $mh tasks/s: ours over HTTP / original = $(awk -v a="$mh" -v b="$mo" 'BEGIN {printf "%.1f", a/b}')×"
  fi
}

main
