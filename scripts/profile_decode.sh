#!/usr/bin/env bash
# Nsight Compute's census of one decode step on the GPU machine: every kernel the step launches (an
# eager step of `di_engine_bench --profile-step BATCH`, between cudaProfilerStart and Stop), its
# duration and DRAM bytes, grouped by kernel and grid by tools/profile/ncu_kernel_census.py. The
# profiler runs the kernels one at a time and leaves clocks and caches alone.
# usage: scripts/profile_decode.sh BUILD_DIR LOG_DIR MODEL_DIR BATCH...   e.g. build-gpu $OUT /tmp/4b 1 16
set -uo pipefail
build=$1 logs=$2 model=$3
shift 3
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "ncu not found" >&2; exit 1; }
mkdir -p "$logs"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
for batch in "$@"; do
  "$ncu" --profile-from-start off --clock-control none --cache-control none --metrics "$metrics" \
    --csv --page raw --print-units base \
    "$build/bench/di_engine_bench" --model "$model" --profile-step "$batch" >"$logs/decode_census_b$batch.csv" \
    2>"$logs/decode_census_b$batch.log" || { echo "ncu failed at batch $batch (decode_census_b$batch.log)"; continue; }
  echo "== decode step census, batch $batch"
  python3 "$(dirname "$0")/../tools/profile/ncu_kernel_census.py" "$logs/decode_census_b$batch.csv" \
    --json "$logs/decode_census_b$batch.json" --top 30
done
