# Sourced by the profile scripts: Nsight Compute on one launch of a kernel, on the GPU machine.
#   ncu_profile NAME LOG_DIR KERNEL_REGEX LAUNCH_SKIP COMMAND...
# writes LOG_DIR/NAME.ncu.log (the run), NAME.details.txt (every section) and NAME.source.csv (SASS
# with the samples per line), then prints the headline metrics given in NCU_HEADLINES (a grep -E
# pattern) and the biggest stall reasons. Returns non-zero only when there is no ncu.
ncu_profile() {
  local name=$1 logs=$2 regex=$3 skip=$4
  shift 4
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  [ -n "$ncu" ] || { echo "ncu not found" >&2; return 1; }
  mkdir -p "$logs"
  "$ncu" --set full --import-source yes -k "regex:$regex" --launch-skip "$skip" --launch-count 1 -f -o "/tmp/$name" \
    "$@" >"$logs/$name.ncu.log" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page details >"$logs/$name.details.txt" 2>&1
  "$ncu" -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass >"$logs/$name.source.csv" 2>&1 || true
  echo "== $name"
  grep -E "$NCU_HEADLINES" "$logs/$name.details.txt" | head -20
  grep -iE "^ +Stall|stall" "$logs/$name.details.txt" | head -12
  return 0
}
