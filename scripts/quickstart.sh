#!/usr/bin/env bash
# Installs what is missing, builds, writes the embedded default model (the tiny preset) and
# generates from it with the CPU reference engine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
[ -f build/models/tiny/model.safetensors ] || ./build/deltainfer make-tiny-model build/models/tiny
./build/deltainfer inspect build/models/tiny | head -7
echo "generate (greedy, 16 tokens):"
./build/deltainfer generate --model build/models/tiny --prompt-ids 9419,374,264,1273,315 --max-tokens 16
