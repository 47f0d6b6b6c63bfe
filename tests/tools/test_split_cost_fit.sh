#!/usr/bin/env bash
# bench/di_split_cost_fit: the tree's cost-model constants are the fit of the timings recorded beside
# them (fitting again from them moves no constant past its printed digits), a fit started from them
# on timings the model itself made recovers them (and 1.1 times them on those timings 10% longer),
# and malformed timings are refused with the line named.
set -uo pipefail
tool=$1
recorded=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/check.sh"

# The recorded fit: constants held as in the data's note; the fitted line equals the tree's.
out=$("$tool" "$recorded" --hold carry_step,launch 2>&1)
tree=$(grep '^in the tree' <<<"$out" | sed 's/^in the tree: //')
fitted=$(grep '^fitted' <<<"$out" | sed 's/^fitted *: //')
check "the recorded timings reproduce the tree's constants" "$tree" "$fitted"
check "the recorded fit's error" "rms log error 0.044" "$tree"

# Timings the model made with the tree's constants: every row estimated exactly, nothing to move.
"$tool" "$recorded" 2>&1 | awk 'NR > 4 && $3 !~ /^0=/ {printf "%s %s %s %.6f\n", $1, $2, $3, $5 / 1000}' >"$work/model.txt"
[ -s "$work/model.txt" ] || echo "FAIL - no rows read back"
self=$("$tool" "$work/model.txt" 2>&1)
check "the model's own timings: no error" "rms log error 0.000" "$(grep '^fitted' <<<"$self")"
check "the model's own timings: the tree's constants" \
  "$(grep '^in the tree' <<<"$self" | sed 's/^in the tree: //; s/; rms.*//')" "$(grep '^fitted' <<<"$self")"

# The same timings 10% longer: every term of the model but the full-wave factor scales with its
# constant, so the fit must find each time constant 1.1 times the tree's, exactly.
awk '{printf "%s %s %s %.6f\n", $1, $2, $3, $4 * 1.1}' "$work/model.txt" >"$work/slower.txt"
slower=$("$tool" "$work/slower.txt" 2>&1 | grep '^fitted')
check "10% slower: no error" "rms log error 0.000" "$slower"
# The fitted constants against 1.1 times the tree's, within 1% (the full-wave factor: itself).
numbers() { grep -oE '[0-9]+\.[0-9]+' <<<"$1" | head -8 | tr '\n' ' '; }
want=$(numbers "$(grep '^in the tree' <<<"$self")") got=$(numbers "$slower")
close=$(awk -v want="$want" -v got="$got" 'BEGIN {
  n = split(want, w, " "); split(got, g, " "); bad = 0
  for (i = 1; i <= 8; ++i) { x = (i == 5 ? w[i] : 1.1 * w[i]); if (g[i] < 0.99 * x || g[i] > 1.01 * x) bad++ }
  print (n == 8 && bad == 0) ? "all within 1%" : bad " off" }')
check "10% slower: every time constant 1.1x the tree's" "all within 1%" "$close ($got against 1.1 x $want)"

# Refusals.
printf '2/8 1x2048 -1 0.1\n2/8 1x2048 100 0.1\n' >"$work/bad_segments.txt"
check "segment tokens not a multiple of 64" "bad_segments.txt:2: segment tokens must be" \
  "$("$tool" "$work/bad_segments.txt" 2>&1; echo "rc $?")"
printf '2/8 1x2048 -1\n' >"$work/short.txt"
check "a line without its time" "short.txt:1: expected 'HEADS SHAPE SEGMENT_TOKENS MS'" "$("$tool" "$work/short.txt" 2>&1)"
printf '2/8 1x2048 0 0.1\n' >"$work/policy_only.txt"
check "nothing to fit" "has no unsplit or forced-split timing to fit" "$("$tool" "$work/policy_only.txt" 2>&1)"
printf '28 1x2048 -1 0.1\n' >"$work/heads.txt"
check "heads without a slash" "heads '28' is not HK/HV" "$("$tool" "$work/heads.txt" 2>&1)"
check "a missing file" "cannot read $work/none.txt" "$("$tool" "$work/none.txt" 2>&1)"
"$tool" "$work/short.txt" >/dev/null 2>&1 && { echo "FAIL - a malformed file exited 0"; failures=$((failures + 1)); }
finish
