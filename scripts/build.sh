#!/usr/bin/env bash
# Configures and builds deltainfer into build/ (CUDA parts too when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
[ -f build/CMakeCache.txt ] || cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build build --parallel "$(nproc)"
