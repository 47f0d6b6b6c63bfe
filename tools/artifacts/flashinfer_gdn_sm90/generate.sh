#!/usr/bin/env bash
# Generates the FlashInfer SM90 GDN prefill bundle: FlashInfer's CuTe-DSL kernel compiled ahead of
# time for sm_90a (no GPU needed), in deltainfer's two state layouts, as the artifacts the
# "flashinfer-sm90" backend loads (docs/models/qwen35/external-gdn-backend.md).
#
# usage: tools/artifacts/flashinfer_gdn_sm90/generate.sh [--out DIR] [--wheels DIR] [--check-only]
#   --out DIR      where the bundle goes (default build-artifacts/flashinfer-gdn-sm90)
#   --wheels DIR   where the pinned wheels are, or are downloaded to (default .deps/wheels/flashinfer-gdn)
#   --check-only   check the pinned wheels and stop
# Every input is pinned in pins.lock (wheel SHA-256, the kernel source before and after aot.patch, the
# patch itself); a missing or different one stops the run before anything is compiled. Needs
# Python 3.12 (python3.12, or DI_PYTHON312), gcc and the CUDA toolkit (cuda_runtime.h, libcudart_static) on this machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$root/build-artifacts/flashinfer-gdn-sm90
wheels=$root/.deps/wheels/flashinfer-gdn
check_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --wheels) wheels=$2; shift 2 ;;
    --check-only) check_only=1; shift ;;
    *) echo "unknown argument $1 (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done

# 1. The pinned wheels: present and identical to the pins, or fetched from PyPI by exact name.
mkdir -p "$wheels"
missing=()
while read -r kind sha name; do
  [ "$kind" = wheel ] || continue
  [ -f "$wheels/$name" ] || missing+=("$name")
done < <(grep -v '^#' "$here/pins.lock")
if [ ${#missing[@]} -gt 0 ] && [ "${DI_NO_DOWNLOAD:-0}" != 1 ]; then
  for name in "${missing[@]}"; do
    spec=$(echo "$name" | cut -d- -f1,2 | sed 's/-/==/; s/_/-/g')
    echo "fetching $spec from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux_2_28_x86_64 -d "$wheels" "$spec" ||
      { echo "error: could not download $spec; put $name into $wheels by hand" >&2; exit 1; }
  done
fi
bad=0
while read -r kind sha name; do
  [ "$kind" = wheel ] || continue
  if [ ! -f "$wheels/$name" ]; then
    echo "error: pinned wheel $name is missing from $wheels. Get it with:" >&2
    echo "  python3 -m pip download --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 -d $wheels $(echo "$name" | cut -d- -f1,2 | sed 's/-/==/; s/_/-/g')" >&2
    bad=1
    continue
  fi
  got=$(sha256sum "$wheels/$name" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "error: $wheels/$name has SHA-256 $got, pins.lock pins $sha: another build of that release, or a damaged download; delete it and run again" >&2
    bad=1
  fi
done < <(grep -v '^#' "$here/pins.lock")
others=$(cd "$wheels" && ls | grep -v -F -x -f <(awk '$1 == "wheel" {print $3}' "$here/pins.lock") || true)
[ -n "$others" ] && echo "note: $wheels also holds files outside the pins (ignored): $others" >&2
[ $bad -eq 0 ] || exit 1
echo "pinned wheels: all $(grep -c '^wheel' "$here/pins.lock") present, SHA-256 as pinned"
[ $check_only -eq 1 ] && exit 0

python312=${DI_PYTHON312:-python3.12}
"$python312" --version >/dev/null 2>&1 ||
  { echo "error: $python312 does not run: Python 3.12 is needed (the pinned wheels are cp312); set DI_PYTHON312" >&2; exit 1; }
cuda_home=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda_home/include/cuda_runtime.h" ] || { echo "error: no CUDA toolkit at $cuda_home (set CUDA_HOME)" >&2; exit 1; }

# 2. The generator's environment: the pinned wheels, then what their modules import (requirements.txt).
venv=$root/.deps/flashinfer-gdn-venv
if [ ! -x "$venv/bin/python" ]; then
  "$python312" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --no-deps $(awk '$1 == "wheel" {print "'"$wheels"'/" $3}' "$here/pins.lock")
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"

# 3. Compile, export, link, write the manifest (generate.py checks the source and patch pins first).
CUDA_HOME=$cuda_home "$venv/bin/python" "$here/generate.py" --out "$out" --pins "$here/pins.lock" \
  --patch "$here/aot.patch" --bridge "$here/bridge.c" --wheels "$wheels"
