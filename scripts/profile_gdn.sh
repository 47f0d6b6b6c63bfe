#!/usr/bin/env bash
# Nsight Compute on one GDN prefill backend, one launch per shape, on the GPU machine: where the
# kernel's time goes (stall reasons, issue slots, shared-memory conflicts, the hottest SASS lines).
# Build with line info first (DI_CMAKE_ARGS=-DCMAKE_CUDA_FLAGS=-lineinfo scripts/gpu_round.sh ...).
# The launch is the engine's: raw q and k with DI_GDN_QK_L2NORM (di_gdn_bench --qk-l2norm).
# usage: scripts/profile_gdn.sh BUILD_DIR LOG_DIR BACKEND HEADS SHAPE...   e.g. build-gpu $OUT sm90 16/32 4x8192
set -uo pipefail
source "$(dirname "$0")/ncu_profile.sh"
build=$1 logs=$2 backend=$3 heads=$4
shift 4
NCU_HEADLINES="Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy|Shared Memory Configuration Size|Bank Conflicts|Compute \(SM\) Throughput|Memory Throughput"
for shape in "$@"; do
  ncu_profile "${backend}_${heads/\//-}_${shape}" "$logs" "gdn_${backend}" 0 \
    "$build/bench/di_gdn_bench" --backend "$backend" --heads "$heads" --shape "$shape" --qk-l2norm --once || exit 1
done
