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
for a in "\$@"; do [ "\$a" = --timeline ] && echo "  timeline of a stand-in"; done
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
check "the run leaves flat files, two a variant" "bench-fp16.txt bench-ref.txt bench-turns.txt machine.txt tests-fp16.log tests-turns.log" \
  "$(cd "$work/logs" && ls | tr '\n' ' ' | sed 's/ $//')"
bash "$scripts/gdn_variants.sh" pairs "$work/logs"
check "pairs: each comparison's provenance beside it" "source commit abc1234 dirty false" "$(cat "$work/logs/fp16/machine.txt")"
check "pairs: the first variant's runs as A" "0.400" "$(cat "$work/logs/fp16/bench-A.txt")"
check "pairs: the variant's runs as B" "0.360" "$(cat "$work/logs/fp16/bench-B.txt")"
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
bash "$scripts/gdn_variants.sh" pairs "$work/logs2"
check "pairs: no comparison for the untimed variant" "no" "$([ -d "$work/logs2/fp16" ] && echo yes || echo no)"
check "pairs: its tests' log kept" "GdnPrefill.Something" "$(cat "$work/logs2/tests-fp16.log")"

# A variant built with --bench-only (no test binary) is timed without tests, and says so.
rm -f "$v/order.txt" "$v/fp16/di_gpu_tests"
make_variant "$v" fp16 0.360 0 && rm "$v/fp16/di_gpu_tests"
printf 'ref (default options)\nturns -DX=1\nfp16 -DY=ON (bench only)\nsource commit abc1234 dirty false\n' >"$v/variants.txt"
out=$(bash "$scripts/gdn_variants.sh" run "$v" --cases "2/8" --bench-args "--timeline" "$work/logs4" 2>&1)
rc=$?
check "a bench-only variant's run passes" "rc 0" "rc $rc"
check "its tests are not run, and that is said" "tests on fp16: none (built with --bench-only)" "$out"
check "it is timed" "ref turns fp16 fp16 turns ref" "$(tr '\n' ' ' <"$v/order.txt")"
check "the bench arguments reach the bench" "timeline of a stand-in" "$(cat "$work/logs4/bench-fp16.txt")"
# Without the mark, a variant whose test binary is missing fails its tests and is not timed.
printf 'ref (default options)\nturns -DX=1\nfp16 -DY=ON\nsource commit abc1234 dirty false\n' >"$v/variants.txt"
out=$(bash "$scripts/gdn_variants.sh" run "$v" --cases "2/8" "$work/logs5" 2>&1)
check "an unmarked variant without tests fails the round" "tests on fp16: rc 127" "$out"

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
check "an unknown mode" "the mode is build, run or pairs" "$out"
out=$(bash "$scripts/gdn_variants.sh" pairs "$work/nothing" 2>&1)
check "pairs of a directory that holds no run" "machine.txt missing" "$out"
finish
