#!/usr/bin/env bash
# Packs every peer of tools/bench/gdn_peers.py (the wheels of gdn_peer_wheels.lock and of
# flashqla_wheels.lock, checked against their SHA-256s) into one xz archive that fits the GPU
# machine's carry budget beside a library and FlashInfer's prebuilt module (docs/benchmarks/gdn-peers.md,
# "Every peer in one carry"). A wheel is a zip of its site-packages files, so they are unpacked into one
# folder `site` (needs unzip); z3's command-line binary is left out (the module loads z3/lib alone),
# and a library a wheel holds twice, as lib.so and its versioned lib.so.N (zip has no links), is
# kept once with the other name a link to it. xz -9's 64 MiB window then takes 79 + 18 MB of wheels to
# about 45 MB.
# On the GPU machine: tar xJf ARCHIVE -C /tmp && PYTHONPATH=/tmp/site python3 tools/bench/gdn_peers.py ...
#
# usage: tools/bench/pack_peer_site.sh [ARCHIVE]   (default .whl/peers/site.tar.xz)
set -euo pipefail
archive=${1:-.whl/peers/site.tar.xz}
here=$(dirname "${BASH_SOURCE[0]}")
"$here/fetch_wheels.sh" "$here/flashqla_wheels.lock" .whl/flashqla-wheels --budget-mib 80
"$here/fetch_wheels.sh" "$here/gdn_peer_wheels.lock" .whl/gdn-peers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/site"
for wheel in .whl/flashqla-wheels/*.whl .whl/gdn-peers/*.whl; do
  unzip -qo "$wheel" -d "$work/site"  # unzip keeps the files' modes
done
rm -rf "$work"/site/z3_solver-*.data  # the z3 executable (22 MB)
find "$work/site" -type f -name '*.so.*' | while read -r versioned; do
  plain=${versioned%.so.*}.so
  if [ -f "$plain" ] && [ ! -L "$plain" ] && cmp -s "$plain" "$versioned"; then
    ln -sf "$(basename "$versioned")" "$plain"
  fi
done
mkdir -p "$(dirname "$archive")"
tar cf - -C "$work" site | xz -T2 -9 >"$archive"
echo "pack_peer_site: $archive, $(stat -c %s "$archive") bytes"
