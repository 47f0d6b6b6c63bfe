#!/usr/bin/env bash
# tools/profile/ncu_kernel_census.py on a small raw page of the shape Nsight Compute writes: launches
# grouped by kernel and grid, names shortened, times and rates summed, set against another page;
# bad input refused by name.
set -uo pipefail
tool=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
header='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"'
linear='"void di::kernels::<unnamed>::small_batch_linear_kernel<1, 1, (di::kernels::SmallBatchInput)3, 2>(di::kernels::SmallBatchLinearParams, long)"'
{
  echo "$header"
  echo '"","","","","","","","","","","","byte","byte","ns"'
  echo "\"0\",\"1\",\"b\",\"h\",$linear,\"1\",\"7\",\"(256, 1, 1)\",\"(320, 1, 1)\",\"0\",\"9.0\",\"21000000\",\"2000\",\"6000\""
  echo '"1","1","b","h","void di::kernels::(anonymous namespace)::rms_norm_kernel<float>(di::kernels::NormParams)","1","7","(256, 1, 1)","(1, 1, 1)","0","9.0","5000","5000","2000"'
  echo "\"2\",\"1\",\"b\",\"h\",$linear,\"1\",\"7\",\"(256, 1, 1)\",\"(320, 1, 1)\",\"0\",\"9.0\",\"21000000\",\"0\",\"8000\""
  echo "\"3\",\"1\",\"b\",\"h\",$linear,\"1\",\"7\",\"(256, 1, 1)\",\"(160, 1, 1)\",\"0\",\"9.0\",\"1000\",\"0\",\"1000\""
} >"$work/page.csv"
source "$(dirname "$0")/check.sh"
out=$(python3 "$tool" "$work/page.csv" --json "$work/out.json" 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL - exit $rc: $out"; failures=$((failures + 1)); }
check "totals" "4 launches, 3 kernels x grids, 17.0 us in all, 42.0 MB of DRAM traffic" "$out"
check "a group of two launches, name shortened, longest first" \
  "| small_batch_linear_kernel<1, 1, 3, 2> | (320, 1, 1) | 2 | 14.0 | 82.4% | 7.00 | 21.00 | 3000 |" "$out"
check "another grid of the same kernel is its own group" "| small_batch_linear_kernel<1, 1, 3, 2> | (160, 1, 1) | 1 | 1.0 |" "$out"
check "a namespaced kernel without enum arguments" "| rms_norm_kernel<float> | (1, 1, 1) | 1 | 2.0 |" "$out"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['launches'] == 4 and d['kernel_ns'] == 17000, d" \
  "$work/out.json" && echo "ok   - the JSON totals" || { echo "FAIL - the JSON totals"; failures=$((failures + 1)); }
# Against another page: the first group's launches twice as long there, the norm absent, a kernel only there.
sed -e 's/"6000"$/"12000"/' -e 's/"8000"$/"16000"/' -e '/rms_norm_kernel/d' "$work/page.csv" >"$work/other.csv"
echo '"9","1","b","h","void di::kernels::only_there(int)","1","7","(256, 1, 1)","(4, 1, 1)","0","9.0","0","0","500"' >>"$work/other.csv"
out=$(python3 "$tool" "$work/page.csv" --against "$work/other.csv" 2>&1)
check "the other page's time per launch and the change" \
  "| small_batch_linear_kernel<1, 1, 3, 2> | (320, 1, 1) | 2 | 14.0 | 82.4% | 7.00 | 21.00 | 3000 | 14.00 | -50.0% |" "$out"
check "a group the other page lacks" "| rms_norm_kernel<float> | (1, 1, 1) | 1 | 2.0 | 11.8% | 2.00 | 0.01 | 5 | - | |" "$out"
check "a group only the other page has" "only against: only_there (4, 1, 1), 1 launches, 0.5 us" "$out"
sed 's/"ns"$/"us"/' "$work/page.csv" >"$work/us.csv"
out=$(python3 "$tool" "$work/us.csv" 2>&1) && { echo "FAIL - microseconds accepted"; failures=$((failures + 1)); }
check "durations not in ns are refused" "durations in 'us', expected ns" "$out"
echo "not, a, profile" >"$work/bad.csv"
out=$(python3 "$tool" "$work/bad.csv" 2>&1) && { echo "FAIL - bad page exited 0"; failures=$((failures + 1)); }
check "a page without the header is refused by name" "no 'Kernel Name' header row" "$out"
head -2 "$work/page.csv" >"$work/empty.csv"
out=$(python3 "$tool" "$work/empty.csv" 2>&1) && { echo "FAIL - empty page exited 0"; failures=$((failures + 1)); }
check "a page without launches is refused" "no kernel launches" "$out"
finish
