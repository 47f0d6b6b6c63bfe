#!/usr/bin/env bash
# On the GPU machine: cuBLASLt's algorithm per GEMM shape, measured against the heuristic's first, in
# one build (the engine's --gemm-algos): the tests matching FILTER, then di_engine_bench's prefill
# steps (PREFILL, LENxSEQS) interleaved in ORDER (default heuristic, measured, measured, heuristic),
# then di_gemm_algo_bench on the prefill shapes. Logs in LOG_DIR; a table printed last.
# usage: DI_SOURCE_COMMIT=<sha> scripts/gemm_algos_round.sh [--tests FILTER] [--prefill "128x8 ..."]
#          [--order "heuristic measured ..."] LOG_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
filter='KernelTest.CublasLt*:GpuModel.*:*Golden*'
prefill="128x8 512x1 2048x1 1024x8"
order="heuristic measured measured heuristic"
logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) filter=$2; shift 2 ;;
    --prefill) prefill=$2; shift 2 ;;
    --order) order=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
[ -n "$logs" ] || { echo "usage: $0 [--tests FILTER] [--prefill SHAPES] LOG_DIR" >&2; exit 2; }
mkdir -p "$logs"
source scripts/gpu_build_env.sh
start=$(date +%s)
echo "source commit ${DI_SOURCE_COMMIT:-unknown} dirty ${DI_SOURCE_DIRTY:-unknown}" >"$logs/machine.txt"
record_gpu_state "$logs/machine.txt"
unpack_device_deps
configure_gpu_build . build-gpu >"$logs/configure.log" 2>&1 &&
  cmake --build build-gpu --target di_gpu_tests di_engine_bench di_gemm_algo_bench deltainfer -j "$(nproc)" \
    >"$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

timeout 240 build-gpu/tests/di_gpu_tests --gtest_filter="$filter" >"$logs/tests.log" 2>&1
tests_rc=$?
echo "tests: rc $tests_rc, $(grep -E '^\[  (PASSED|FAILED)  \]' "$logs/tests.log" | tr '\n' ' ')"

model=/tmp/deltainfer-4b-geometry
[ -d "$model" ] || build-gpu/deltainfer make-tiny-model --preset 4b-geometry --no-tokenizer "$model" \
  >"$logs/make-4b.log" 2>&1 || { echo "make-tiny-model 4b-geometry failed"; exit 1; }
read -r -a shapes <<<"$prefill"
run=0
for choice in $order; do
  run=$((run + 1))
  timeout 300 build-gpu/bench/di_engine_bench --model "$model" --prefill "${shapes[@]}" --decode-batches 1 \
    --decode-steps 5 --gemm-algos "$choice" --json "$logs/engine-$run-$choice.json" >"$logs/engine-$run-$choice.txt" 2>&1 ||
    echo "di_engine_bench ($choice) failed: see $logs/engine-$run-$choice.txt"
done
timeout 300 build-gpu/bench/di_gemm_algo_bench --rows 512,2048 --json "$logs/gemm_algos.json" >"$logs/gemm_algos.txt" 2>&1

echo
echo "| prefill | heuristic ms | measured ms | measured / heuristic |"
echo "|---|---|---|---|"
python3 - "$logs" "$order" "${shapes[@]}" <<'EOF'
import json, sys
logs, order, shapes = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
runs = {"heuristic": [], "measured": []}
for run, choice in enumerate(order, 1):
    try:
        runs[choice].append(json.load(open(f"{logs}/engine-{run}-{choice}.json")))
    except (OSError, ValueError):
        pass
def mean_ms(reports, shape):
    len_, seqs = map(int, shape.split("x"))
    v = [p["median_ms"] for r in reports for p in r["prefill"] if p["len"] == len_ and p["seqs"] == seqs]
    return sum(v) / len(v) if v else float("nan")
for shape in shapes:
    h, m = mean_ms(runs["heuristic"], shape), mean_ms(runs["measured"], shape)
    print(f"| {shape} | {h:.3f} | {m:.3f} | {m / h:.4f} |")
for r in runs["measured"]:
    print(f"measured: {r.get('gemm_measured_shapes')} shapes timed, {r.get('gemm_measured_changes')} changed")
EOF
echo "wall time $(( $(date +%s) - start )) s"
exit $tests_rc
