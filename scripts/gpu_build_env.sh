# Sourced by the GPU scripts, on the GPU machine: the build dependencies carried in .device-deps/
# (scripts/gpu_deps.sh) unpacked into a sysroot, and one CMake configuration for sm_90a against it.
#   unpack_device_deps            -> sets DI_SYSROOT
#   configure_gpu_build SRC BUILD [CMAKE_ARGS...]   (run from the repository root)
#   overlay_tree OVERLAY DIR      -> DIR: the working tree with an A/B overlay (scripts/gdn_ab_overlay.sh)
DI_SYSROOT=/tmp/deltainfer-sysroot

unpack_device_deps() {
  rm -rf "$DI_SYSROOT"
  local deb
  for deb in .device-deps/*.deb; do dpkg -x "$deb" "$DI_SYSROOT"; done
}

configure_gpu_build() {
  local src=$1 build=$2
  shift 2
  rm -f "$build/CMakeCache.txt"
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$DI_SYSROOT/usr" \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DDI_TOKENIZER_DIR="$PWD/.deps/qwen35-tokenizer" "$@"
}

# The "A" tree of an A/B round: a copy of the working tree (no builds, no .git) with the overlay's
# src/ files laid over it and the files it lists as added since removed.
overlay_tree() {
  local overlay=$1 tree=$2 path
  rm -rf "$tree" && mkdir -p "$tree"
  tar cf - --exclude='./build*' --exclude=./.device --exclude=./.git . | tar xf - -C "$tree"
  while IFS= read -r -d '' path; do
    mkdir -p "$tree/$(dirname "$path")" && cp "$overlay/$path" "$tree/$path"
  done < <(cd "$overlay" && find src -type f -print0)
  while IFS= read -r path; do [ -n "$path" ] && rm -f "$tree/$path"; done <"$overlay/removed.txt"
}
