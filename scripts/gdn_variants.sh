#!/usr/bin/env bash
# GDN prefill kernel variants built on the development machine and timed on the GPU machine in one
# call, with no build there: a round's device time goes to the tests and the benches.
#
#   scripts/gdn_variants.sh build DIR NAME[:CMAKE_ARG[,CMAKE_ARG...]] ...     (development machine)
#     builds the working tree once per variant (build-variant-NAME) and copies di_gdn_bench, and for
#     every variant but the first di_gpu_tests, into DIR/NAME/ (DIR git-ignored, e.g. .device/variants,
#     then carried); DIR/variants.txt records each variant's CMake arguments and the tree's commit
#     and dirty state. The first variant is the reference the others are timed against.
#   scripts/gdn_variants.sh run DIR [--tests FILTER] [--cases LIST] [--rounds N] LOG_DIR   (GPU machine)
#     runs every variant's tests but the first's (a gtest filter; a variant whose tests fail is not
#     timed), then di_gdn_bench (--backend sm90 --qk-l2norm) for every case, the variants in order and
#     then reversed (A B C C B A), N times (default 1). LOG_DIR/NAME/ holds the first variant's runs as
#     bench-A.txt and NAME's as bench-B.txt, with machine.txt and NAME's tests.log, so that
#     tools/bench/ab_round.py means / record read each variant against the first; the tables are
#     printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
dir=$2
shift 2

if [ "$mode" = build ]; then
  [ $# -ge 2 ] || { echo "gdn_variants: give at least two variants (the first is the reference)" >&2; exit 2; }
  for spec in "$@"; do  # every name checked before anything is built
    name=${spec%%:*}
    [[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "gdn_variants: '$name' is not a variant name ([A-Za-z0-9_-])" >&2; exit 2; }
  done
  mkdir -p "$dir" && : >"$dir/variants.txt"
  commit=$(git rev-parse --short HEAD) dirty=false
  git diff --quiet HEAD -- src bench include CMakeLists.txt cmake || dirty=true
  first=1
  for spec in "$@"; do
    name=${spec%%:*} args=()
    [[ "$spec" == *:* ]] && IFS=, read -r -a args <<<"${spec#*:}"
    build=build-variant-$name targets=(di_gdn_bench)
    [ $first -eq 0 ] && targets+=(di_gpu_tests)
    rm -f "$build/CMakeCache.txt"
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a "${args[@]}" \
      >"$dir/configure-$name.log" 2>&1 || { echo "gdn_variants: $name did not configure ($dir/configure-$name.log)" >&2; exit 1; }
    cmake --build "$build" --target "${targets[@]}" >"$dir/build-$name.log" 2>&1 ||
      { tail -20 "$dir/build-$name.log" >&2; echo "gdn_variants: $name did not build" >&2; exit 1; }
    rm -rf "${dir:?}/$name" && mkdir -p "$dir/$name"
    cp "$build/bench/di_gdn_bench" "$dir/$name/"
    [ $first -eq 0 ] && cp "$build/tests/di_gpu_tests" "$dir/$name/"
    echo "$name ${args[*]:-(default options)}" >>"$dir/variants.txt"
    first=0
  done
  echo "source commit $commit dirty $dirty" >>"$dir/variants.txt"
  cat "$dir/variants.txt"
  du -sh "$dir"
  exit 0
fi

[ "$mode" = run ] || { echo "gdn_variants: the mode is build or run, not '$mode'" >&2; exit 2; }
filter='*GdnPrefill*:*Sm90*:*ContextSplit*:*GdnStateLayout*:*GdnLayoutEquivalence*'
cases="16/64:4x8192 16/32:4x8192 16/32:8x2048 4/16:1x32768" rounds=1 logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) filter=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -*) echo "gdn_variants: unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
[ -n "$logs" ] || { echo "gdn_variants: LOG_DIR is required" >&2; exit 2; }
[ -f "$dir/variants.txt" ] || { echo "gdn_variants: $dir/variants.txt missing (run the build mode first)" >&2; exit 2; }
mapfile -t names < <(grep -v '^source commit' "$dir/variants.txt" | cut -d' ' -f1)
[ ${#names[@]} -ge 2 ] || { echo "gdn_variants: $dir holds fewer than two variants" >&2; exit 2; }
start=$(date +%s)
mkdir -p "$logs"
machine=$logs/machine.txt
{ cat "$dir/variants.txt"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1; } >"$machine"
ref=${names[0]} timed=("$ref")
for name in "${names[@]:1}"; do
  mkdir -p "$logs/$name" && cp "$machine" "$logs/$name/machine.txt"
  timeout 300 "$dir/$name/di_gpu_tests" --gtest_filter="$filter" >"$logs/$name/tests.log" 2>&1
  rc=$?
  echo "tests on $name: rc $rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$logs/$name/tests.log" | tr '\n' ' ')($(( $(date +%s) - start )) s)"
  if [ $rc -eq 0 ]; then timed+=("$name"); else grep -E '^\[  FAILED' "$logs/$name/tests.log" | head -5; fi
done
order=("${timed[@]}")
for (( i = ${#timed[@]} - 1; i >= 0; i-- )); do order+=("${timed[i]}"); done
for (( r = 0; r < rounds; r++ )); do
  for name in "${order[@]}"; do
    for c in $cases; do
      heads=${c%%:*} shape=()
      [[ "$c" == *:* ]] && shape=(--shape "${c#*:}")
      timeout 120 "$dir/$name/di_gdn_bench" --backend sm90 --heads "$heads" "${shape[@]}" --qk-l2norm \
        >>"$logs/bench-$name.txt" 2>&1 || echo "bench $name $c: rc $?"
    done
  done
done
echo "wall time $(( $(date +%s) - start )) s"
status=0
for name in "${timed[@]:1}"; do
  cp "$logs/bench-$ref.txt" "$logs/$name/bench-A.txt" && cp "$logs/bench-$name.txt" "$logs/$name/bench-B.txt"
  echo; echo "$name against $ref:"
  python3 tools/bench/ab_round.py means gdn "$logs/$name" || status=1
done
[ ${#timed[@]} -eq ${#names[@]} ] || status=1
exit $status
