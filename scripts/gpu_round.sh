#!/usr/bin/env bash
# The GPU round, run on the GPU machine in one go: unpack the build dependencies carried in
# .device-deps/ (scripts/gpu_deps.sh), build with CUDA for sm_90a, run every test that can run
# there, write full logs to LOG_DIR, and print a short table last.
# usage: scripts/gpu_round.sh [LOG_DIR]        (default: $OUT, else gpu-logs)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-${OUT:-gpu-logs}}
mkdir -p "$logs"
start=$(date +%s)

sysroot=/tmp/deltainfer-sysroot
rm -rf "$sysroot" build-gpu/CMakeCache.txt
for deb in .device-deps/*.deb; do dpkg -x "$deb" "$sysroot"; done
[ -f .deps/qwen35-tokenizer/tokenizer.json ] || echo "warning: .deps/qwen35-tokenizer missing: carry it" >&2

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  git log -1 --format='commit %H' 2>/dev/null || true
} >"$logs/machine.txt" 2>&1

cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$sysroot/usr" \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DDI_TOKENIZER_DIR="$PWD/.deps/qwen35-tokenizer" >"$logs/configure.log" 2>&1
configure_rc=$?
build_rc=1
[ $configure_rc -eq 0 ] && { cmake --build build-gpu --parallel "$(nproc)" >"$logs/build.log" 2>&1; build_rc=$?; }

# tokenizer.hf_equality installs tokenizers from PyPI, which this machine cannot reach.
test_rc=1
if [ $build_rc -eq 0 ]; then
  ctest --test-dir build-gpu --output-on-failure --no-tests=error --parallel "$(nproc)" \
    -E '^tokenizer\.hf_equality$' >"$logs/ctest.log" 2>&1
  test_rc=$?
fi
passed=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$logs/ctest.log" 2>/dev/null || echo "no tests ran")

echo
echo "| step | result |"
echo "|---|---|"
echo "| machine | $(sed -n 2p "$logs/machine.txt") |"
echo "| configure | $([ $configure_rc -eq 0 ] && echo ok || echo "FAILED (configure.log)") |"
echo "| build (CUDA sm_90a) | $([ $build_rc -eq 0 ] && echo ok || echo "FAILED (build.log)") |"
echo "| tests | $passed |"
echo "| wall time | $(( $(date +%s) - start )) s |"
[ $test_rc -eq 0 ]
