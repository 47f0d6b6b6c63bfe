# Sourced by the GPU scripts, on the GPU machine: the build dependencies carried in .device-deps/
# (scripts/gpu_deps.sh) unpacked into a sysroot, and one CMake configuration for sm_90a against it.
#   unpack_device_deps            -> sets DI_SYSROOT
#   configure_gpu_build SRC BUILD [CMAKE_ARGS...]   (run from the repository root)
#   overlay_tree OVERLAY DIR      -> DIR: the working tree with an A/B overlay (scripts/gdn_ab_overlay.sh)
#   record_gpu_state FILE         the GPU's identity and state appended to FILE
#   check_overlay_matches_tree OVERLAY  whether this tree is the one the overlay was made against
#   begin_ab_round OVERLAY LOG_DIR  the start of an A/B round: arguments checked, machine recorded,
#                                 dependencies unpacked, the A tree laid out at DI_AB_TREE_A
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
  done < <(cd "$overlay" && find . -type f \( -path './src/*' -o -path './bench/*' \) -printf '%P\0')
  while IFS= read -r path; do [ -n "$path" ] && rm -f "$tree/$path"; done <"$overlay/removed.txt"
}

# The start of an A/B round (scripts/gdn_ab_round.sh, scripts/decode_ab_round.sh): the overlay and the
# log directory checked, the machine and both sides' sources recorded in LOG_DIR/machine.txt, the
# build dependencies unpacked and the A tree laid out. Returns 2 on bad arguments.
DI_AB_TREE_A=/tmp/deltainfer-ab-a
# The GPU's identity and state, appended to FILE: which physical board ran a round (its UUID and
# bus), its clock and power limits, temperature, active clock-limiting reasons, uncorrected ECC
# errors and any other process on it, so that a round that behaves oddly can be told apart.
record_gpu_state() {
  local file=$1 query
  for query in uuid,pci.bus_id clocks.max.memory,power.limit,temperature.gpu clocks_event_reasons.active \
               ecc.errors.uncorrected.volatile.total; do
    nvidia-smi --query-gpu="$query" --format=csv >>"$file" 2>&1 || true  # the header names the fields
  done
  echo "other processes on the GPU: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | wc -l)" >>"$file"
}

# Whether the working tree's src/ and bench/ are those the overlay was made against (its tree.sha256):
# the A tree is this tree with the overlay laid over it, so a file changed or added since would build
# into A as it is now. Returns 2 with the files named otherwise.
check_overlay_matches_tree() {
  local overlay=$1 changed listed present
  [ -f "$overlay/tree.sha256" ] || { echo "$overlay has no tree.sha256: make it again with scripts/gdn_ab_overlay.sh" >&2; return 2; }
  changed=$(sha256sum --quiet -c "$overlay/tree.sha256" 2>/dev/null | sed 's/: .*//')
  listed=$(sed 's/^[0-9a-f]*  //' "$overlay/tree.sha256" | sort)
  present=$(find src bench -type f | sort)
  changed="$changed $(comm -13 <(echo "$listed") <(echo "$present") | tr '\n' ' ')"
  [ -z "${changed// /}" ] ||
    { echo "the overlay $overlay was made against another tree; changed or added since: $changed; make it again with scripts/gdn_ab_overlay.sh" >&2; return 2; }
}

begin_ab_round() {
  local overlay=$1 logs=$2
  [ -n "$overlay" ] && [ -f "$overlay/revision.txt" ] ||
    { echo "--a-overlay DIR (from scripts/gdn_ab_overlay.sh) is required" >&2; return 2; }
  check_overlay_matches_tree "$overlay" || return 2
  [ -n "$logs" ] || { echo "LOG_DIR is required" >&2; return 2; }
  mkdir -p "$logs"
  echo "source commit ${DI_SOURCE_COMMIT:-unknown} dirty ${DI_SOURCE_DIRTY:-unknown}; A = $(cat "$overlay/revision.txt")'s src/ over it" >"$logs/machine.txt"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$logs/machine.txt" 2>&1
  nvcc --version | tail -1 >>"$logs/machine.txt"
  record_gpu_state "$logs/machine.txt"
  unpack_device_deps
  overlay_tree "$overlay" "$DI_AB_TREE_A"
}
