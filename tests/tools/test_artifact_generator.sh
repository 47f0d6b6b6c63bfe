#!/usr/bin/env bash
# The artifact generator refuses to run on inputs other than its pins, before anything is compiled,
# and says how to get the right ones (no network needed: DI_NO_DOWNLOAD=1).
set -uo pipefail
gen=$1
work=$2
rm -rf "$work" && mkdir -p "$work/empty" "$work/wrong"
failures=0
expect() {  # expect NAME PATTERN CMD...: non-zero exit, PATTERN in the output
  local name=$1 pattern=$2
  shift 2
  local out
  if out=$("$@" 2>&1); then
    echo "FAIL - $name: exited 0"; failures=$((failures + 1))
  elif ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL - $name: output lacks '$pattern': $out"; failures=$((failures + 1))
  else
    echo "ok   - $name"
  fi
}
export DI_NO_DOWNLOAD=1
expect "missing pinned wheels" "python3 -m pip download --no-deps" "$gen" --check-only --wheels "$work/empty"
pinned=$(awk '$1 == "wheel" {print $3; exit}' "$(dirname "$gen")/pins.lock")
echo "not a wheel" >"$work/wrong/$pinned"
expect "a wheel of other content" "$pinned has SHA-256" "$gen" --check-only --wheels "$work/wrong"
expect "unknown argument" "unknown argument" "$gen" --frobnicate
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
