#!/usr/bin/env bash
# On the GPU machine: one GDN prefill kernel against another, built from two trees in one call.
#   B is the working tree; A is the working tree with the overlay of scripts/gdn_ab_overlay.sh laid
#   over it (the src/ files of another revision). Both are built (di_gdn_bench; B also di_gpu_tests),
#   the tests matching TESTS run on B, then di_gdn_bench runs interleaved A B B A for every case, and
#   B's benches are skipped when its tests fail (--bench-on-failure runs them anyway, for a variant whose
#   timing says whether it is worth fixing; the round still exits non-zero). Options: --timeline (a third build of B configured
#   with -DDI_SM90_TIMELINE=ON, its stage timeline per case), --profile HEADS:SHAPE (Nsight Compute on
#   one launch of B's kernel, or of A's when B's tests fail), --backend NAME (default sm90),
#   --normalised-qk (q and k normalised ahead, as the lab ran before --qk-l2norm existed; by default
#   the benches pass --qk-l2norm: raw q and k with DI_GDN_QK_L2NORM, as the engine calls the backend),
#   --b-cmake ARG (one more CMake argument for B's builds, e.g. -DDI_SM90_OPERAND_SPLITS=none: a build
#   setting measured against the tree without it).
#   Logs in LOG_DIR; a table of the means, A against B, printed last.
# usage: DI_SOURCE_COMMIT=<sha> scripts/gdn_ab_round.sh --a-overlay DIR [--tests FILTER] [--cases LIST]
#          [--timeline] [--profile HEADS:SHAPE] [--backend NAME] [--normalised-qk] [--bench-on-failure]
#          [--b-cmake ARG] LOG_DIR
#        FILTER: a gtest filter (default: the GDN prefill, state-layout, inverse and model tests);
#        LIST: cases HEADS[:SHAPE] separated by spaces (default "16/32 16/64:4x8192 2/8").
set -uo pipefail
cd "$(dirname "$0")/.."
overlay="" filter='*GdnPrefill*:*GdnStateLayout*:*GdnLayoutEquivalence*:*GdnDiagnostic*:*ChunkInverse*:GpuModel.*'
cases="16/32 16/64:4x8192 2/8" timeline=0 profile="" backend=sm90 logs="" qk_flag=--qk-l2norm bench_on_failure=0
b_cmake=()
while [ $# -gt 0 ]; do
  case "$1" in
    --a-overlay) overlay=$2; shift 2 ;;
    --tests) filter=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --timeline) timeline=1; shift ;;
    --profile) profile=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --normalised-qk) qk_flag=""; shift ;;
    --bench-on-failure) bench_on_failure=1; shift ;;
    --b-cmake) b_cmake+=("$2"); shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
source scripts/gpu_build_env.sh
start=$(date +%s)
begin_ab_round "$overlay" "$logs" || exit $?
tree_a=$DI_AB_TREE_A

# The trees and their builds, side by side.
builds=("build-gpu" "/tmp/deltainfer-ab-a-build")
configure_gpu_build . build-gpu -DCMAKE_CUDA_FLAGS=-lineinfo "${b_cmake[@]}" >"$logs/configure-B.log" 2>&1 &
configure_gpu_build "$tree_a" "${builds[1]}" -DCMAKE_CUDA_FLAGS=-lineinfo >"$logs/configure-A.log" 2>&1 &
[ $timeline -eq 1 ] && configure_gpu_build . /tmp/deltainfer-ab-timeline -DDI_SM90_TIMELINE=ON "${b_cmake[@]}" >"$logs/configure-T.log" 2>&1 &
wait
jobs_each=$(( $(nproc) / (2 + timeline) ))
cmake --build build-gpu --target di_gpu_tests di_gdn_bench -j $jobs_each >"$logs/build-B.log" 2>&1 & pb=$!
cmake --build "${builds[1]}" --target di_gdn_bench -j $jobs_each >"$logs/build-A.log" 2>&1 & pa=$!
[ $timeline -eq 1 ] && { cmake --build /tmp/deltainfer-ab-timeline --target di_gdn_bench -j $jobs_each >"$logs/build-T.log" 2>&1 & pt=$!; }
wait $pb; rb=$?; wait $pa; ra=$?; rt=0; [ $timeline -eq 1 ] && { wait $pt; rt=$?; }
echo "q and k: ${qk_flag:-normalised ahead}"
echo "builds: A rc $ra, B rc $rb, timeline rc $rt ($(( $(date +%s) - start )) s)"
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { tail -20 "$logs/build-A.log" "$logs/build-B.log"; exit 1; }

# B's tests; its benches only when they pass.
timeout 600 build-gpu/tests/di_gpu_tests --gtest_filter="$filter" >"$logs/tests.log" 2>&1
tests_rc=$?
echo "tests on B: rc $tests_rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$logs/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$logs/tests.log" | head -10
order="A B B A"
if [ $tests_rc -ne 0 ]; then
  if [ $bench_on_failure -eq 1 ]; then echo "B's tests failed: its benches run anyway (--bench-on-failure)"; else order="A"; fi
fi
for side in $order; do
  bin=${builds[1]}/bench/di_gdn_bench
  [ "$side" = B ] && bin=build-gpu/bench/di_gdn_bench
  for c in $cases; do
    heads=${c%%:*} shape=""
    [[ "$c" == *:* ]] && shape="--shape ${c#*:}"
    timeout 120 "$bin" --backend "$backend" --heads "$heads" $shape $qk_flag >>"$logs/bench-$side.txt" 2>&1 ||
      echo "bench $side $c: rc $?"
  done
done
if [ $timeline -eq 1 ] && [ $rt -eq 0 ] && { [ $tests_rc -eq 0 ] || [ $bench_on_failure -eq 1 ]; }; then
  for c in $cases; do
    heads=${c%%:*} shape=""
    [[ "$c" == *:* ]] && shape="--shape ${c#*:}"
    timeout 120 /tmp/deltainfer-ab-timeline/bench/di_gdn_bench --backend "$backend" --timeline --heads "$heads" $shape $qk_flag \
      >>"$logs/timeline-B.txt" 2>&1 || echo "timeline $c: rc $?"
  done
fi
if [ -n "$profile" ]; then
  build=build-gpu
  [ $tests_rc -ne 0 ] && build=${builds[1]}
  bash scripts/profile_gdn.sh "$build" "$logs/ncu" "$backend" "${profile%%:*}" "${profile#*:}" | tail -20
fi

# The means of each side's runs per case.
python3 tools/bench/ab_round.py means gdn "$logs"
echo "wall time $(( $(date +%s) - start )) s"
[ $tests_rc -eq 0 ]
