#!/usr/bin/env bash
# tools/profile/ncu_sass_regions.py on a small SASS page of the shape Nsight Compute writes: the
# regions are cut at barriers and waits, counted, and the second role found; bad input is refused.
set -uo pipefail
tool=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
header='"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","# Samples","Instructions Executed","stall_barrier","stall_wait","stall_barrier (Not Issued)"'
{
  echo '"Kernel Name","k",'
  echo "$header"
  echo '"0x0","      HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;","40","40","40","8","30","10","30"'
  echo '"0x10","      WARPGROUP.DEPBAR.LE gsb0, 0x0 ;","500","500","500","8","500","0","500"'
  echo '"0x20","      FMUL R1, R2, R3 ;","7","7","7","16","0","7","0"'
  echo '"0x30","      USETMAXREG.DEALLOC.CTAPOOL 0x78 ;","1","1","1","4","0","1","0"'
  echo '"0x40","      MUFU.EX2 R4, R5 ;","600","600","600","12","0","600","0"'
  echo '"0x50","  @P0 BAR.SYNC.DEFER_BLOCKING R4, 0x80 ;","20","20","20","4","20","0","20"'
} >"$work/page.csv"
source "$(dirname "$0")/check.sh"
out=$(python3 "$tool" "$work/page.csv" --min-samples 100 --per 4 2>&1)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL - exit $rc: $out"; failures=$((failures + 1)); }
check "totals and the second role" "6 instructions, 1168 samples; second role from instruction 3 (621 samples)" "$out"
check "first region up to the wgmma wait" "[0, 1] ends at 'WARPGROUP.DEPBAR.LE gsb0, 0x0 ;'" "$out"
check "its samples and per-unit count" "samples 540 (46.2%), warp instructions executed 16, 4 per unit" "$out"
check "its stall reasons" "stalls: barrier 530, wait 10" "$out"
check "the second role's region, predicated barrier" "[4, 5] (second role) ends at '@P0 BAR.SYNC.DEFER_BLOCKING R4, 0x80 ;'" "$out"
if grep -qF "[2, " <<<"$out"; then
  echo "FAIL - the region of 8 samples is printed below --min-samples 100: $out"; failures=$((failures + 1))
else
  echo "ok   - regions below --min-samples left out"
fi
echo "not, a, profile" >"$work/bad.csv"
out=$(python3 "$tool" "$work/bad.csv" 2>&1) && { echo "FAIL - bad page exited 0"; failures=$((failures + 1)); }
check "a page without the header is refused by name" "no 'Address' header row" "$out"
out=$(python3 "$tool" "$work/absent.csv" 2>&1) && { echo "FAIL - missing file exited 0"; failures=$((failures + 1)); }
check "a missing file is refused by name" "absent.csv: No such file or directory" "$out"
finish
