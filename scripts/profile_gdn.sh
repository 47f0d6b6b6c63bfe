#!/usr/bin/env bash
# Nsight Compute on one GDN prefill backend, one launch per shape, on the GPU machine: where the
# kernel's time goes (stall reasons, issue slots, shared-memory conflicts, the hottest SASS lines).
# Build with line info first (DI_CMAKE_ARGS=-DCMAKE_CUDA_FLAGS=-lineinfo scripts/gpu_round.sh ...).
# The launch is the engine's: raw q and k with DI_GDN_QK_L2NORM (di_gdn_bench --qk-l2norm).
# DI_PROFILE_KERNEL picks another kernel of the call by a regex of its name (default gdn_BACKEND, the
# prefill kernel; for sm90's context split e.g. carry_entry_states or plan_segments), and
# DI_PROFILE_SKIP how many of its launches to pass over first (default 0: a split's step 1, as step 3
# is the same kernel's next launch).
# usage: scripts/profile_gdn.sh BUILD_DIR LOG_DIR BACKEND HEADS SHAPE...   e.g. build-gpu $OUT sm90 16/32 4x8192
set -uo pipefail
source "$(dirname "$0")/ncu_profile.sh"
build=$1 logs=$2 backend=$3 heads=$4
shift 4
kernel=${DI_PROFILE_KERNEL:-gdn_${backend}} skip=${DI_PROFILE_SKIP:-0}
NCU_HEADLINES="Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy|Shared Memory Configuration Size|Bank Conflicts|Compute \(SM\) Throughput|Memory Throughput"
for shape in "$@"; do
  name="${backend}_${heads/\//-}_${shape}"
  [ -n "${DI_PROFILE_KERNEL:-}" ] && name="${name}_${kernel//[^A-Za-z0-9_]/}"
  ncu_profile "$name" "$logs" "$kernel" "$skip" \
    "$build/bench/di_gdn_bench" --backend "$backend" --heads "$heads" --shape "$shape" --qk-l2norm --once || exit 1
done
