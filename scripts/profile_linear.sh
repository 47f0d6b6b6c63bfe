#!/usr/bin/env bash
# Nsight Compute on the small-batch linear kernel of one decode-sized layer, on the GPU machine: its
# memory throughput against the DRAM peak, the bytes in flight, the warps' stall reasons and the
# hottest SASS lines. One launch, after the benchmark's first few (caches and clocks warm).
# Build with line info first (DI_CMAKE_ARGS=-DCMAKE_CUDA_FLAGS=-lineinfo scripts/gpu_round.sh ...).
# usage: scripts/profile_linear.sh BUILD_DIR LOG_DIR LAYER ROWS...   e.g. build-gpu $OUT out_proj 1 16
#        (LAYER: a part of a layer's name in bench/linear_bench.cpp: in_proj, "q, k, v", gate, down,
#        out_proj, lm_head)
set -uo pipefail
build=$1 logs=$2 layer=$3
shift 3
mkdir -p "$logs"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "ncu not found" >&2; exit 1; }
for rows in "$@"; do
  name="linear_$(echo "$layer" | tr -c 'a-z0-9' '_')_m$rows"
  "$ncu" --set full --import-source yes -k "regex:small_batch_linear" --launch-skip 10 --launch-count 1 -f \
    -o "/tmp/$name" "$build/bench/di_linear_bench" --layer "$layer" --rows "$rows" >"$logs/$name.ncu.log" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page details >"$logs/$name.details.txt" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass >"$logs/$name.source.csv" 2>&1 || true
  echo "== $name"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy|Waves Per SM|Grid Size|L2 Hit Rate" \
    "$logs/$name.details.txt" | head -20
  grep -iE "^ +Stall|stall" "$logs/$name.details.txt" | head -12
done
