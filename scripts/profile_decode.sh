#!/usr/bin/env bash
# Nsight Compute's census of one engine step on the GPU machine: every kernel the step launches, its
# duration and DRAM bytes, grouped by kernel and grid by tools/profile/ncu_kernel_census.py. A STEP is
# a decode batch size (an eager decode step of `di_engine_bench --profile-step BATCH`) or a prefill
# shape LENxSEQS (one prefill step, `--profile-prefill`), run between cudaProfilerStart and Stop. The
# profiler runs the kernels one at a time and leaves clocks and caches alone.
# usage: scripts/profile_decode.sh BUILD_DIR LOG_DIR MODEL_DIR STEP...   e.g. build-gpu $OUT /tmp/4b 1 16 1024x8
set -uo pipefail
build=$1 logs=$2 model=$3
shift 3
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "ncu not found" >&2; exit 1; }
mkdir -p "$logs"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
for step in "$@"; do
  if [[ $step == *x* ]]; then
    name=prefill_census_$step what="prefill step census, $step" run=(--profile-prefill "$step")
  else
    name=decode_census_b$step what="decode step census, batch $step" run=(--profile-step "$step")
  fi
  "$ncu" --profile-from-start off --clock-control none --cache-control none --metrics "$metrics" \
    --csv --page raw --print-units base \
    "$build/bench/di_engine_bench" --model "$model" "${run[@]}" >"$logs/$name.csv" 2>"$logs/$name.log" ||
    { echo "ncu failed on the $what ($name.log)"; continue; }
  echo "== $what"
  python3 "$(dirname "$0")/../tools/profile/ncu_kernel_census.py" "$logs/$name.csv" --json "$logs/$name.json" --top 30
done
