#!/usr/bin/env bash
# On the GPU machine: a change to the decode step against the tree before it, built from two trees
# in one call.
#   B is the working tree; A is the working tree with the overlay of scripts/gdn_ab_overlay.sh laid
#   over it (the src/ files of another revision). Both are built (di_linear_bench, di_engine_bench,
#   deltainfer; B also di_gpu_tests), B writes the 4b-geometry checkpoint and runs the tests matching
#   FILTER, then interleaved A B B A: the decode-sized linear layers (di_linear_bench --fused-input, 1,
#   8 and 16 rows: at one row with the op ahead fused, as a decode step runs them), the decode steps (di_engine_bench --skip-prefill: graphed and eager at batch 1, 8, 16, 64)
#   and bench-offline (1024 tokens in, 256 out) at each of the --offline concurrencies; with --prefill
#   "1024x8 2048x1", di_engine_bench also times those prefill steps (LENxSEQS), and with --context N
#   its decode steps follow N tokens of prompt (128 without). B's runs are
#   skipped when its tests fail. --census "1 16": Nsight Compute's census of one decode step of each
#   side per batch size (scripts/profile_decode.sh), B's kernels set against A's. Logs in LOG_DIR; a
#   table of the means, A against B, last.
# usage: DI_SOURCE_COMMIT=<sha> scripts/decode_ab_round.sh --a-overlay DIR [--tests FILTER]
#          [--offline "16"] [--census "1 16"] [--prefill "1024x8"] [--context 1024] LOG_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
overlay="" filter='*SmallBatch*:GpuModel.*:*EngineGpu*' offline="16" census="" prefill="" context=128 logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --a-overlay) overlay=$2; shift 2 ;;
    --tests) filter=$2; shift 2 ;;
    --offline) offline=$2; shift 2 ;;
    --census) census=$2; shift 2 ;;
    --prefill) prefill=$2; shift 2 ;;
    --context) context=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
source scripts/gpu_build_env.sh
start=$(date +%s)
begin_ab_round "$overlay" "$logs" || exit $?
tree_a=$DI_AB_TREE_A
builds=("build-gpu" "/tmp/deltainfer-ab-a-build")
configure_gpu_build . build-gpu -DDI_WITH_SERVER=OFF >"$logs/configure-B.log" 2>&1 &
configure_gpu_build "$tree_a" "${builds[1]}" -DDI_WITH_SERVER=OFF >"$logs/configure-A.log" 2>&1 &
wait
jobs_each=$(( $(nproc) / 2 ))
cmake --build build-gpu --target di_gpu_tests di_linear_bench di_engine_bench deltainfer -j $jobs_each >"$logs/build-B.log" 2>&1 & pb=$!
cmake --build "${builds[1]}" --target di_linear_bench di_engine_bench deltainfer -j $jobs_each >"$logs/build-A.log" 2>&1 & pa=$!
wait $pb; rb=$?; wait $pa; ra=$?
echo "builds: A rc $ra, B rc $rb ($(( $(date +%s) - start )) s)"
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { tail -20 "$logs/build-A.log" "$logs/build-B.log"; exit 1; }

model=/tmp/deltainfer-4b-geometry
[ -f "$model/model.safetensors" ] ||
  build-gpu/deltainfer make-tiny-model --preset 4b-geometry --no-tokenizer "$model" >"$logs/make-4b.log" 2>&1 ||
  { echo "make-tiny-model 4b-geometry failed"; exit 1; }
export DI_4B_MODEL_DIR=$model

# B's tests; its benches only when they pass.
timeout 900 build-gpu/tests/di_gpu_tests --gtest_filter="$filter" >"$logs/tests.log" 2>&1
tests_rc=$?
echo "tests on B: rc $tests_rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$logs/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$logs/tests.log" | head -10
order="A B B A"
[ $tests_rc -ne 0 ] && order="A"
for side in $order; do
  build=${builds[1]}
  [ "$side" = B ] && build=build-gpu
  timeout 300 "$build/bench/di_linear_bench" --rows 1 8 16 --fused-input >>"$logs/linear-$side.txt" 2>&1 || echo "linear $side: rc $?"
  prefill_args=(--skip-prefill)
  [ -n "$prefill" ] && prefill_args=(--prefill $prefill)
  timeout 300 "$build/bench/di_engine_bench" --model "$model" "${prefill_args[@]}" --context "$context" \
    >>"$logs/engine-$side.txt" 2>&1 ||
    echo "engine $side: rc $?"
  for conc in $offline; do
    out=$(timeout 300 "$build/deltainfer" bench-offline --model "$model" --device cuda --num-requests $(( 2 * conc )) \
      --input-len 1024 --output-len 256 --concurrency "$conc" --max-num-seqs 64 2>&1) || echo "offline $side c$conc: rc $?"
    printf '%s\n' "$out" >>"$logs/offline-$side.txt"
    grep 'output tokens/s' <<<"$out" | sed "s/\$/   [concurrency $conc]/" >>"$logs/offline-$side.txt"
  done
done
# The census of both sides, B's set against A's.
if [ -n "$census" ] && [ $tests_rc -eq 0 ]; then
  bash scripts/profile_decode.sh "${builds[1]}" "$logs/census-A" "$model" $census >/dev/null
  bash scripts/profile_decode.sh build-gpu "$logs/census" "$model" $census >/dev/null
  for batch in $census; do
    echo "== decode step census, batch $batch: B against A"
    python3 tools/profile/ncu_kernel_census.py "$logs/census/decode_census_b$batch.csv" --top 30 \
      --against "$logs/census-A/decode_census_b$batch.csv"
  done
fi

# The GPU's state after the runs (temperature, clock-limiting reasons), beside its state before.
echo "after the runs:" >>"$logs/machine.txt"
record_gpu_state "$logs/machine.txt"

# The means of each side's runs.
python3 tools/bench/ab_round.py means decode "$logs"
echo "wall time $(( $(date +%s) - start )) s"
[ $tests_rc -eq 0 ]
