#!/usr/bin/env bash
# Nsight Compute on one GDN prefill backend, one launch per shape, on the GPU machine: where the
# kernel's time goes (stall reasons, issue slots, shared-memory conflicts, the hottest SASS lines).
# Build with line info first (DI_CMAKE_ARGS=-DCMAKE_CUDA_FLAGS=-lineinfo scripts/gpu_round.sh ...).
# usage: scripts/profile_gdn.sh BUILD_DIR LOG_DIR BACKEND HEADS SHAPE...   e.g. build-gpu $OUT sm90 16/32 4x8192
set -uo pipefail
build=$1 logs=$2 backend=$3 heads=$4
shift 4
mkdir -p "$logs"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
[ -n "$ncu" ] || { echo "ncu not found" >&2; exit 1; }
for shape in "$@"; do
  name="${backend}_${heads/\//-}_${shape}"
  "$ncu" --set full --import-source yes -k "regex:gdn_${backend}" --launch-count 1 -f -o "/tmp/$name" \
    "$build/bench/di_gdn_bench" --backend "$backend" --heads "$heads" --shape "$shape" --once >"$logs/$name.ncu.log" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page details >"$logs/$name.details.txt" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass >"$logs/$name.source.csv" 2>&1 || true
  echo "== $name"
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per|Achieved Occupancy|Shared Memory Configuration Size|Bank Conflicts|Compute \(SM\) Throughput|Memory Throughput" \
    "$logs/$name.details.txt" | head -20
  # The biggest stall reasons (Warp State section).
  grep -iE "^ +Stall|stall" "$logs/$name.details.txt" | head -12
done
