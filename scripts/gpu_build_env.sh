# Sourced by the GPU scripts, on the GPU machine: the build dependencies carried in .device-deps/
# (scripts/gpu_deps.sh) unpacked into a sysroot, and one CMake configuration for sm_90a against it.
#   unpack_device_deps            -> sets DI_SYSROOT
#   configure_gpu_build SRC BUILD [CMAKE_ARGS...]   (run from the repository root)
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
