#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (fails when no test ran).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --no-tests=error --parallel "$(nproc)" "$@"
