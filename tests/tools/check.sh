# What the tool tests of this folder share, sourced by each: `check NAME PATTERN TEXT` passes when
# TEXT holds PATTERN (fixed string), else prints both and counts a failure; `finish` prints the count
# and exits non-zero when any check failed.
failures=0
check() {
  if grep -qF -- "$2" <<<"$3"; then echo "ok   - $1"; else echo "FAIL - $1: lacks '$2' in: $3"; failures=$((failures + 1)); fi
}
finish() {
  echo "$failures failure(s)"
  [ "$failures" -eq 0 ]
}
