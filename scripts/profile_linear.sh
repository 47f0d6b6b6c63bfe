#!/usr/bin/env bash
# Nsight Compute on the small-batch linear kernel of one decode-sized layer, on the GPU machine: its
# memory throughput against the DRAM peak, the warps' stall reasons and the hottest SASS lines. One
# launch, after the benchmark's first few (caches and clocks warm).
# Build with line info first (DI_CMAKE_ARGS=-DCMAKE_CUDA_FLAGS=-lineinfo scripts/gpu_round.sh ...).
# usage: scripts/profile_linear.sh BUILD_DIR LOG_DIR LAYER [--fused-input] ROWS...   e.g. build-gpu $OUT out_proj 1 16
#        (--fused-input: the launch with the op ahead applied on the way in, at 1 and 2 rows)
#        (LAYER: a part of a layer's name in bench/linear_bench.cpp: in_proj, "q, k, v", gate, down,
#        out_proj, lm_head)
set -uo pipefail
source "$(dirname "$0")/ncu_profile.sh"
build=$1 logs=$2 layer=$3
shift 3
fused=()
[ "${1:-}" = --fused-input ] && { fused=(--fused-input); shift; }
NCU_HEADLINES="Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy|Waves Per SM|Grid Size|L2 Hit Rate"
for rows in "$@"; do
  ncu_profile "linear_$(printf %s "$layer" | tr -c 'a-z0-9' '_')_m$rows${fused:+_fused}" "$logs" small_batch_linear 10 \
    "$build/bench/di_linear_bench" --layer "$layer" --rows "$rows" "${fused[@]}" || exit 1
done
