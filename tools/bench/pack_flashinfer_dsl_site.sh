#!/usr/bin/env bash
# Packs FlashInfer's current release and the CuTe DSL it compiles its SM90 GDN prefill with
# (flashinfer_dsl_wheels.lock), plus the support wheels of gdn_peer_wheels.lock (tvm-ffi, pynvml,
# requests, ninja), into one folder `site`, xz-compressed and cut into parts small enough that each
# travels in its own call to the GPU machine (the compiler's library alone is 193 MB, 62 MiB as xz:
# more than one call carries). FlashInfer's data/ folder (the C++ sources and headers its nvcc JIT
# compiles; 452 MB) is left out: the DSL kernels do not read it.
# On the GPU machine, with every part carried (a warm machine keeps what earlier calls carried):
#   cat PARTS... | xz -d | tar x -C /tmp
#   PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages python3 tools/bench/gdn_peers.py ...
# (the second entry is what the DSL's .pth file would add in a site-packages folder).
#
# usage: tools/bench/pack_flashinfer_dsl_site.sh [OUT_DIR [PART_MB]]
#        (default .whl/fi-dsl and 44: parts OUT_DIR/part-0/site.tar.xz.00, OUT_DIR/part-1/site.tar.xz.01, ...,
#        one folder a part so that each call carries one)
set -euo pipefail
out=${1:-.whl/fi-dsl}
part_mb=${2:-44}
here=$(dirname "${BASH_SOURCE[0]}")
"$here/fetch_wheels.sh" "$here/flashinfer_dsl_wheels.lock" .whl/flashinfer-dsl-wheels --budget-mib 200
"$here/fetch_wheels.sh" "$here/gdn_peer_wheels.lock" .whl/gdn-peers
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/site"
unzip -qo .whl/flashinfer-dsl-wheels/flashinfer_python-*.whl -d "$work/site" -x 'flashinfer/data/*'
for wheel in .whl/flashinfer-dsl-wheels/{nvidia_cutlass_dsl,cuda_python,cuda_tile,protobuf}*.whl \
             .whl/gdn-peers/{apache_tvm_ffi,nvidia_ml_py,requests,urllib3,charset_normalizer,ninja}-*.whl; do
  unzip -qo "$wheel" -d "$work/site"
done
rm -rf "$out" && mkdir -p "$out"
tar cf - -C "$work" site | xz -T2 -9 >"$work/site.tar.xz"
echo "pack_flashinfer_dsl_site: $(stat -c %s "$work/site.tar.xz") bytes, sha256 $(sha256sum "$work/site.tar.xz" | cut -c1-16)"
split -b "${part_mb}M" -d "$work/site.tar.xz" "$work/site.tar.xz."
i=0
for part in "$work"/site.tar.xz.[0-9]*; do
  mkdir -p "$out/part-$i" && mv "$part" "$out/part-$i/"
  echo "  $out/part-$i/$(basename "$part"): $(stat -c %s "$out/part-$i/$(basename "$part")") bytes"
  i=$((i + 1))
done
