#!/usr/bin/env bash
# The loads the decode kernels issue ahead of griddepcontrol.wait stay there in their machine code
# (tools/profile/sass_wait_audit.py on cuobjdump -sass of the built objects): ptxas moves
# non-coherent loads past the wait, which no test of results can see and which cost the decode step
# 2.8% at batch 1 until the small-batch kernel's first weight loads were made coherent
# (docs/benchmarks/decode.md). First the audit itself on a small listing, then the real objects.
# usage: test_loads_ahead_of_wait.sh CUOBJDUMP AUDIT_TOOL BUILD_DIR WORK_DIR
set -uo pipefail
cuobjdump=$1
tool=$2
build=$3
work=$4
rm -rf "$work" && mkdir -p "$work"
source "$(dirname "$0")/check.sh"

# The audit on a listing of the shape cuobjdump writes: one kernel loads before its wait, one after.
cat >"$work/listing.sass" <<'T'
	code for sm_90a
		Function : _Z11ahead_kernelv
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x0000 */
        /*0010*/                   LDG.E.NA.128 R4, desc[UR4][R2.64] ;          /* 0x0000 */
        /*0020*/                   ACQBULK ;                                    /* 0x0000 */
        /*0030*/                   LDG.E R8, desc[UR4][R6.64] ;                 /* 0x0000 */
		Function : _Z12behind_kernelv
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x0000 */
        /*0010*/                   ACQBULK ;                                    /* 0x0000 */
        /*0020*/                   LDG.E.NA.128.CONSTANT R4, desc[UR4][R2.64] ;  /* 0x0000 */
		Function : _Z10plain_kernelv
        /*0000*/                   LDG.E R4, desc[UR4][R2.64] ;                 /* 0x0000 */
T
out=$(python3 "$tool" "$work/listing.sass" --expect 'ahead>=1' 2>&1)
check "loads before the wait counted" "| _Z11ahead_kernelv | 1 | 2 | 4 |" "$out"
check "a kernel whose loads are behind its wait is listed with none" "behind_kernelv | 0 | 1 | 3 |" "$out"
grep -q plain_kernel <<<"$out" && { echo "FAIL - a kernel that does not wait was listed"; failures=$((failures + 1)); }
out=$(python3 "$tool" "$work/listing.sass" --expect 'kernel>=1' 2>&1) && { echo "FAIL - a load behind the wait passed"; failures=$((failures + 1)); }
check "a load behind the wait fails the check, named" "_Z12behind_kernelv: 0 loads before its wait (instruction 1), expected at least 1" "$out"
out=$(python3 "$tool" "$work/listing.sass" --expect 'nothing_like_it>=1' 2>&1) && { echo "FAIL - an expectation that matched nothing passed"; failures=$((failures + 1)); }
check "an expectation that matches no kernel fails" "no kernel that waits matches 'nothing_like_it'" "$out"
grep -v ACQBULK "$work/listing.sass" >"$work/no_wait.sass"
out=$(python3 "$tool" "$work/no_wait.sass" 2>&1) && { echo "FAIL - a listing without waits passed"; failures=$((failures + 1)); }
check "a listing without a waiting kernel fails" "waits for the kernel ahead (no ACQBULK)" "$out"

# The real objects.
if [ ! -x "$cuobjdump" ]; then
  echo "FAIL - no cuobjdump ('$cuobjdump'): scripts/setup.sh fetches it into .deps/cuda-tools (tools/cuda_tools/fetch.py)"
  exit 1
fi
sass=()
for object in small_batch_linear.cu.o norm.cu.o prep.cu.o decode_step.cu.o; do
  path=$(find "$build" -name "$object" -path '*CMakeFiles*' | head -1)
  if [ -z "$path" ]; then echo "FAIL - $object not found under $build"; failures=$((failures + 1)); continue; fi
  "$cuobjdump" -sass "$path" >"$work/$object.sass" 2>&1 || { echo "FAIL - cuobjdump $path: $(head -3 "$work/$object.sass")"; failures=$((failures + 1)); continue; }
  sass+=("$work/$object.sass")
done
# Every small-batch kernel issues its first step group before the wait (8 loads; 4 in 8-row tiles,
# one weight row a thread); the one-token conv, the GDN decode step and the vectorised norms their
# weights, state or parameters.
out=$(python3 "$tool" "${sass[@]}" \
  --expect '[0-9]small_batch_linear_kernel>=8' \
  --expect 'resident_small_batch_linear_kernel>=8' \
  --expect 'swapped_small_batch_linear_kernel.*Li4EEEv>=4' \
  --expect 'swapped_small_batch_linear_kernel.*Li8EEEv>=8' \
  --expect 'gdn_decode_step_kernel>=1' \
  --expect 'd_silu_one_token_kernel>=1' \
  --expect 'rms_norm_kernelI(Lb[01]E)?Li(4|8|16|32)E>=1' \
  --expect 'attention_qk_norm_kernelILi(4|8|16|32)E>=1' 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "ok   - the decode kernels' loads stay ahead of their waits"; else echo "FAIL - $out"; failures=$((failures + 1)); fi
finish
