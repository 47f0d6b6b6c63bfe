#!/usr/bin/env bash
# Packs FlashQLA, FLA and tvm-ffi into one xz archive that fits the GPU machine's carry budget
# (docs/benchmarks/gdn-peers.md, "FlashQLA"): the wheels of tools/bench/flashqla_wheels.lock and
# FLA's and tvm-ffi's from gdn_peer_wheels.lock, checked against their SHA-256s, unpacked into a
# folder `qsite` (a wheel is a zip of its site-packages files; needs unzip), z3's command-line binary left out.
# On the GPU machine: tar xJf ARCHIVE -C /tmp && PYTHONPATH=/tmp/qsite python3 tools/bench/gdn_peers.py ...
#
# usage: tools/bench/pack_flashqla_site.sh [ARCHIVE]   (default .whl/flashqla/qsite.tar.xz)
set -euo pipefail
archive=${1:-.whl/flashqla/qsite.tar.xz}
here=$(dirname "${BASH_SOURCE[0]}")
"$here/fetch_wheels.sh" "$here/flashqla_wheels.lock" .whl/flashqla-wheels --budget-mib 80
"$here/fetch_wheels.sh" "$here/gdn_peer_wheels.lock" .whl/gdn-peers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/qsite"
for wheel in .whl/flashqla-wheels/*.whl .whl/gdn-peers/apache_tvm_ffi-*.whl .whl/gdn-peers/fla_core-*.whl \
             .whl/gdn-peers/flash_linear_attention-*.whl; do
  unzip -qo "$wheel" -d "$work/qsite"  # unzip keeps the files' modes
done
rm -rf "$work"/qsite/z3_solver-*.data  # the z3 executable (22 MB); the module needs only z3/lib
mkdir -p "$(dirname "$archive")"
tar cJf "$archive" -C "$work" qsite
echo "pack_flashqla_site: $archive, $(stat -c %s "$archive") bytes"
