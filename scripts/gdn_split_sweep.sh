#!/usr/bin/env bash
# On the GPU machine: the sm90 prefill's context split swept over segment lengths, for the cost model
# of src/gdn/context_split.h. Builds the working tree (di_gpu_tests, di_gdn_bench, di_split_cost_fit),
# runs the GDN prefill tests, then times every batch of BATCHES at every L of SEGMENTS (-1 unsplit,
# 0 the policy's choice, else segments of L tokens), the whole sweep in one order and then in the
# other; timings.txt gets one line "HEADS SHAPE L MS" per run, and di_split_cost_fit fits the model
# to them (fit.txt, printed last). No run starts after --budget-s seconds (default 480) from the start.
# The benches pass --qk-l2norm (raw q and k with DI_GDN_QK_L2NORM), as the engine calls the backend.
# usage: DI_SOURCE_COMMIT=<sha> scripts/gdn_split_sweep.sh [--batches LIST] [--segments LIST]
#          [--passes N] [--budget-s S] LOG_DIR
#        LIST: space-separated; batches as HEADS:SHAPE (default: the ten of docs/benchmarks/gdn-sm90.md's
#        sweep), segments as numbers (default "-1 0 512 768 1024 1536 2048 3072 4096 8192").
set -uo pipefail
cd "$(dirname "$0")/.."
batches="2/8:1x2048 2/8:1x8192 2/8:1x32768 2/8:4096+28672 2/8:4x8192 4/16:1x8192 4/16:1x32768 4/16:4096+28672 16/32:1x32768 16/32:4096+28672"
segments="-1 0 512 768 1024 1536 2048 3072 4096 8192" passes=2 budget=480 logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) batches=$2; shift 2 ;;
    --segments) segments=$2; shift 2 ;;
    --passes) passes=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
[ -n "$logs" ] || { echo "LOG_DIR is required" >&2; exit 2; }
mkdir -p "$logs"
source scripts/gpu_build_env.sh
start=$(date +%s)
{
  echo "source commit ${DI_SOURCE_COMMIT:-unknown} dirty ${DI_SOURCE_DIRTY:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1
  nvcc --version | tail -1
} >"$logs/machine.txt"
record_gpu_state "$logs/machine.txt"
unpack_device_deps
configure_gpu_build . build-gpu >"$logs/configure.log" 2>&1
cmake --build build-gpu --target di_gpu_tests di_gdn_bench di_split_cost_fit -j "$(nproc)" >"$logs/build.log" 2>&1 ||
  { tail -30 "$logs/build.log"; exit 1; }
echo "built ($(( $(date +%s) - start )) s)"
timeout 300 build-gpu/tests/di_gpu_tests --gtest_filter='*GdnPrefill*:*GdnStateLayout*:*GdnLayoutEquivalence*' \
  >"$logs/tests.log" 2>&1
tests_rc=$?
echo "tests: rc $tests_rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$logs/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$logs/tests.log" | head -10
[ $tests_rc -eq 0 ] || exit 1

runs=()
for L in $segments; do for b in $batches; do runs+=("$b:$L"); done; done
echo "# HEADS SHAPE SEGMENT_TOKENS MS (di_gdn_bench --backend sm90 --qk-l2norm median)" >"$logs/timings.txt"
for pass in $(seq 1 "$passes"); do
  for ((i = 0; i < ${#runs[@]}; ++i)); do
    [ $(( $(date +%s) - start )) -lt "$budget" ] || { echo "budget spent: pass $pass stopped at run $i"; break 2; }
    run=${runs[$i]}
    [ $((pass % 2)) -eq 0 ] && run=${runs[$(( ${#runs[@]} - 1 - i ))]}  # even passes backwards
    IFS=: read -r heads shape L <<<"$run"
    ms=$(timeout 60 build-gpu/bench/di_gdn_bench --backend sm90 --heads "$heads" --shape "$shape" --segment-tokens "$L" --qk-l2norm 2>&1 |
      awk '$1 == "sm90" {print $4}')
    if [ -n "$ms" ]; then echo "$heads $shape $L $ms" >>"$logs/timings.txt"; else echo "no timing: $heads $shape L=$L"; fi
  done
  echo "pass $pass done ($(( $(date +%s) - start )) s)"
done
build-gpu/bench/di_split_cost_fit "$logs/timings.txt" >"$logs/fit.txt" 2>&1
cat "$logs/fit.txt"
