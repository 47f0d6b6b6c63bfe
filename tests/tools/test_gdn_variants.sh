#!/usr/bin/env bash
# scripts/gdn_variants.sh's run mode on stand-in binaries (scripts that print what di_gdn_bench and
# di_gpu_tests print): the tests of every variant but the first, the runs interleaved A B C C B A,
# each variant's table against the first, a variant whose tests fail left untimed with the round
# failing; and the arguments both modes refuse.
set -uo pipefail
scripts=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/check.sh"

# Stand-ins: variant NAME times MS at every case, and its tests pass unless told to fail.
make_variant() {  # DIR NAME MS TESTS_RC
  mkdir -p "$1/$2"
  cat >"$1/$2/di_gdn_bench" <<T
#!/usr/bin/env bash
echo "$2" >>"$1/order.txt"
shape=1x8192; while [ \$# -gt 0 ]; do [ "\$1" = --shape ] && shape=\$2; [ "\$1" = --heads ] && heads=\$2; shift; done
printf 'backend    heads  shape             ms   TFLOP/s   of 784      GB/s  scratch\n'
printf 'sm90       %-6s %-11s %10s      99.5    12.7%%       481        0\n' "\$heads" "\$shape" "$3"
T
  cat >"$1/$2/di_gpu_tests" <<T
#!/usr/bin/env bash
[ $4 -eq 0 ] && { echo "[  PASSED  ] 37 tests."; exit 0; }
echo "[  FAILED  ] GdnPrefill.Something"; echo "[  FAILED  ] 1 test, listed below:"; exit 1
T
  chmod +x "$1/$2/di_gdn_bench" "$1/$2/di_gpu_tests"
}

v=$work/v
make_variant "$v" ref 0.400 0
make_variant "$v" turns 0.380 0
make_variant "$v" fp16 0.360 0
printf 'ref (default options)\nturns -DX=1\nfp16 -DY=ON\nsource commit abc1234 dirty false\n' >"$v/variants.txt"
out=$(bash "$scripts/gdn_variants.sh" run "$v" --cases "16/64:4x8192 2/8" "$work/logs" 2>&1)
rc=$?
check "the run passes" "rc 0" "rc $rc"
check "the second variant's tests run" "tests on turns: rc 0, [  PASSED  ] 37 tests." "$out"
check "a variant against the first" "| 16/64 | 4x8192 | 0.400 (2) | 0.380 (2) | 0.950 |" "$out"
check "the third against the first" "| 2/8 | 1x8192 | 0.400 (2) | 0.360 (2) | 0.900 |" "$out"
check "the variants interleaved, in order and reversed" "ref ref turns turns fp16 fp16 fp16 fp16 turns turns ref ref" \
  "$(tr '\n' ' ' <"$v/order.txt")"
check "each comparison's provenance beside it" "source commit abc1234 dirty false" "$(cat "$work/logs/fp16/machine.txt")"
recorded=$(python3 "$scripts/../tools/bench/ab_round.py" record gdn "$work/logs/turns" --into "$work/data.json" --key t \
  --what "turns" 2>&1)
check "a comparison is recorded as a round" "round 't' recorded" "$recorded"

# A variant whose tests fail is not timed, and the round fails.
rm -f "$v/order.txt"
make_variant "$v" fp16 0.360 1
out=$(bash "$scripts/gdn_variants.sh" run "$v" --cases "2/8" "$work/logs2" 2>&1)
rc=$?
check "a failed variant fails the round" "rc 1" "rc $rc"
check "its failure is named" "GdnPrefill.Something" "$out"
check "the failed variant is not timed" "ref turns turns ref" "$(tr '\n' ' ' <"$v/order.txt")"

# What the script refuses.
out=$(bash "$scripts/gdn_variants.sh" run "$work/nothing" "$work/logs3" 2>&1)
check "a directory without variants" "variants.txt missing" "$out"
out=$(bash "$scripts/gdn_variants.sh" run "$v" 2>&1)
check "no log directory" "LOG_DIR is required" "$out"
out=$(bash "$scripts/gdn_variants.sh" build "$work/b" only 2>&1)
check "one variant is no comparison" "at least two variants" "$out"
out=$(bash "$scripts/gdn_variants.sh" build "$work/b" ref 'bad/name:-DX=1' 2>&1)
check "a name that is not one" "'bad/name' is not a variant name" "$out"
out=$(bash "$scripts/gdn_variants.sh" measure "$work/b" 2>&1)
check "an unknown mode" "the mode is build or run" "$out"
finish
