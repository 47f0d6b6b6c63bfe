#!/usr/bin/env bash
# tools/bench/ab_round.py on small round logs of the shapes the round scripts write: the means table
# of a decode and of a GDN round, a round recorded into a data file with its machine and tests, and
# what it refuses (a round recorded twice, a round that made no runs, a log directory that is not one).
set -uo pipefail
tool=$1
work=$2
rm -rf "$work" && mkdir -p "$work/decode" "$work/gdn" "$work/empty"
source "$(dirname "$0")/check.sh"

# A decode round: two runs a side (the files hold both, as A B B A appends them).
d=$work/decode
for side in A B; do
  a=10.0 b=20.0 step=3.100 tok=3000.0 prefill=127.28
  [ $side = B ] && a=9.0 b=22.0 step=3.000 tok=3100.0 prefill=120.00
  for run in 1 2; do
    cat >>"$d/linear-$side.txt" <<T
| layer | M | weight MB | small-batch us | TB/s | of 4.3 | cuBLASLt us | TB/s | of 4.3 | speed-up |
|---|---|---|---|---|---|---|---|---|---|
| mlp down | 1 | 47.2 | $a | 3.16 | 73.5% | 16.92 | 2.79 | 64.9% | 1.13x |
| gdn out_proj (GDN output norm fused) | 1 | 21.0 | $b | 1.69 | 39.3% | 19.59 | 1.07 | 24.9% | 1.58x |
T
    cat >>"$d/engine-$side.txt" <<T
prefill          tokens/s         ms      MFU
 1024x8             64360     $prefill    69.1%

decode   mode        tokens/s    ms/step   of the floor
1        graph          327.9      $step          64.1%
16       eager         4209.8      3.801          51.5%
T
    echo "output tokens/s $tok   total tokens/s 15457.8   requests/s 12.08   steps 522   preemptions 0   [concurrency 16]" \
      >>"$d/offline-$side.txt"
  done
done
printf 'source commit abc1234 dirty true\nNVIDIA H200, 580.159.04, 1980 MHz\nBuild cuda_13.0\n' >"$d/machine.txt"
echo "[  PASSED  ] 31 tests." >"$d/tests.log"
out=$(python3 "$tool" means decode "$d" 2>&1)
check "a layer's mean, A against B" "| mlp down, 1 rows | 10.000 (2) | 9.000 (2) | 0.900 |" "$out"
check "a second layer" "| gdn out_proj (GDN output norm fused), 1 rows | 20.000 (2) | 22.000 (2) | 1.100 |" "$out"
check "a decode step" "| graph batch 1 | 3.100 (2) | 3.000 (2) | 0.968 |" "$out"
check "bench-offline" "| concurrency 16 | 3000.000 (2) | 3100.000 (2) | 1.033 |" "$out"
check "a prefill step, where the round timed one" "| prefill 1024x8 | 127.280 (2) | 120.000 (2) | 0.943 |" "$out"

# A GDN round, with a timeline.
g=$work/gdn
for side in A B; do
  ms=0.400
  [ $side = B ] && ms=0.380
  for run in 1 2; do
    printf 'backend    heads  shape             ms   TFLOP/s   of 784      GB/s  scratch\n' >>"$g/bench-$side.txt"
    printf 'sm90       16/32  1x8192         %s      99.5    12.7%%       481        0\n' $ms >>"$g/bench-$side.txt"
    printf 'sm90       2/8    4096+28672     %s      44.0     5.6%%       200  51380224\n' 0.5$run >>"$g/bench-$side.txt"
  done
done
printf 'sm90       16/32  1x8192         0.490      87.6    11.2%%       423        0\n  timeline state 0    chunk    6527 cycles\n' \
  >"$g/timeline-B.txt"
cp "$d/machine.txt" "$g/machine.txt"
printf '[  FAILED  ] 2 tests, listed below:\n[  PASSED  ] 38 tests.\n' >"$g/tests.log"
out=$(python3 "$tool" means gdn "$g" 2>&1)
check "a GDN case" "| 16/32 | 1x8192 | 0.400 (2) | 0.380 (2) | 0.950 |" "$out"
check "a batch of unequal lengths" "| 2/8 | 4096+28672 | 0.515 (2) | 0.515 (2) | 1.000 |" "$out"

# Recorded into a data file that has other rounds: kept, the new one added with its provenance.
echo '{"note": "kept", "rounds": {"older": {"what": "x"}}}' >"$work/data.json"
out=$(python3 "$tool" record gdn "$g" --into "$work/data.json" --key new_round --what "B: a change" --a abc1234 \
  --b "abc1234 + change" 2>&1)
check "the record's summary" "round 'new_round' recorded" "$out"
python3 - "$work/data.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rounds"]["new_round"]
assert d["note"] == "kept" and "older" in d["rounds"], d
assert r["runs"]["B"]["median_ms"]["16/32 1x8192"] == [0.38, 0.38], r["runs"]
assert r["machine"][0] == "source commit abc1234 dirty true", r["machine"]
assert r["tests_on_B"] == "2 failed, 38 passed", r["tests_on_B"]
assert r["timeline_B"]["16/32 1x8192"] == ["timeline state 0    chunk    6527 cycles"], r["timeline_B"]
assert r["A"] == "abc1234" and r["what"] == "B: a change"
PY
record_rc=$?
if [ $record_rc -eq 0 ]; then echo "ok   - the recorded round"; else echo "FAIL - the recorded round"; failures=$((failures + 1)); fi

out=$(python3 "$tool" record gdn "$g" --into "$work/data.json" --key new_round --what again 2>&1) &&
  { echo "FAIL - a round recorded twice"; failures=$((failures + 1)); }
check "a round is recorded once" "a round named 'new_round' is there already" "$out"
out=$(python3 "$tool" means decode "$work/empty" 2>&1) && { echo "FAIL - an empty round exited 0"; failures=$((failures + 1)); }
check "a round without runs is refused by name" "no linear_small_batch_us runs" "$out"
out=$(python3 "$tool" means gdn "$work/nowhere" 2>&1) && { echo "FAIL - a missing directory exited 0"; failures=$((failures + 1)); }
check "a missing log directory is refused" "not a directory" "$out"
rm "$d/machine.txt"
out=$(python3 "$tool" record decode "$d" --into "$work/data.json" --key other --what x 2>&1) &&
  { echo "FAIL - a round without machine.txt recorded"; failures=$((failures + 1)); }
check "a round without its provenance is not recorded" "machine.txt: missing" "$out"
finish
