#!/usr/bin/env bash
# GDN prefill kernel variants built on the development machine and timed on the GPU machine in one
# call, with no build there: a round's device time goes to the tests and the benches.
#
#   scripts/gdn_variants.sh build [--bench-only] DIR NAME[:CMAKE_ARG[,CMAKE_ARG...]] ...  (development machine)
#     builds the working tree once per variant (build-variant-NAME) and copies di_gdn_bench, and for
#     every variant but the first di_gpu_tests (not with --bench-only: for diagnostic builds of code
#     whose tests have passed, such as -DDI_SM90_TIMELINE=ON), into DIR/NAME/ (DIR git-ignored, e.g.
#     .device/variants, then carried); DIR/variants.txt records each variant's CMake arguments and
#     the tree's commit and dirty state. The first variant is the reference the others are timed
#     against.
#   scripts/gdn_variants.sh run DIR [--tests FILTER] [--cases LIST] [--rounds N] [--bench-args ARGS] LOG_DIR
#     (GPU machine) runs every variant's tests but the first's (a gtest filter; a variant whose tests
#     fail is not timed), then di_gdn_bench (--backend sm90 --qk-l2norm, and ARGS, e.g. --timeline for
#     variants built with -DDI_SM90_TIMELINE=ON) for every case, the variants in order and
#     then reversed (A B C C B A), N times (default 1). LOG_DIR gets flat files only, at most two a
#     variant: machine.txt, bench-NAME.txt, tests-NAME.log. Each
#     variant's table against the first is printed last.
#   scripts/gdn_variants.sh pairs LOG_DIR                                    (anywhere, after a run)
#     makes LOG_DIR/NAME/ for every variant but the first: the first's runs as bench-A.txt, NAME's as
#     bench-B.txt, machine.txt and tests.log, the directory that tools/bench/ab_round.py means and
#     record read.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
usage() { sed -n '2,22p' "$0" >&2; exit 2; }
bench_only=0
if [ "$mode" = build ] && [ "${2:-}" = --bench-only ]; then bench_only=1; set -- "$1" "${@:3}"; fi
[ $# -ge 2 ] || usage
dir=$2
shift 2

# The comparison directories of a run's flat logs in LOG_DIR (the variants in machine.txt's order).
make_pairs() {  # LOG_DIR OUT_DIR
  local names ref name
  [ -f "$1/machine.txt" ] || { echo "gdn_variants: $1/machine.txt missing (not a run's log directory)" >&2; return 2; }
  mapfile -t names < <(awk '/^source commit/ { exit } { print $1 }' "$1/machine.txt")  # variants.txt's lines
  ref=${names[0]:-}
  [ -n "$ref" ] && [ -f "$1/bench-$ref.txt" ] || { echo "gdn_variants: $1 has no runs of its first variant" >&2; return 2; }
  for name in "${names[@]:1}"; do
    [ -f "$1/bench-$name.txt" ] || continue  # a variant whose tests failed was not timed
    mkdir -p "$2/$name"
    cp "$1/machine.txt" "$2/$name/machine.txt"
    cp "$1/bench-$ref.txt" "$2/$name/bench-A.txt" && cp "$1/bench-$name.txt" "$2/$name/bench-B.txt"
    [ -f "$1/tests-$name.log" ] && cp "$1/tests-$name.log" "$2/$name/tests.log"
  done
  return 0
}

if [ "$mode" = pairs ]; then
  make_pairs "$dir" "$dir"
  exit $?
fi

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
    [ $first -eq 0 ] && [ $bench_only -eq 0 ] && targets+=(di_gpu_tests)
    rm -f "$build/CMakeCache.txt"
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a "${args[@]}" \
      >"$dir/configure-$name.log" 2>&1 || { echo "gdn_variants: $name did not configure ($dir/configure-$name.log)" >&2; exit 1; }
    cmake --build "$build" --target "${targets[@]}" >"$dir/build-$name.log" 2>&1 ||
      { tail -20 "$dir/build-$name.log" >&2; echo "gdn_variants: $name did not build" >&2; exit 1; }
    rm -rf "${dir:?}/$name" && mkdir -p "$dir/$name"
    cp "$build/bench/di_gdn_bench" "$dir/$name/"
    [ $first -eq 0 ] && [ $bench_only -eq 0 ] && cp "$build/tests/di_gpu_tests" "$dir/$name/"
    echo "$name ${args[*]:-(default options)}$([ $bench_only -eq 1 ] && echo ' (bench only)')" >>"$dir/variants.txt"
    first=0
  done
  echo "source commit $commit dirty $dirty" >>"$dir/variants.txt"
  cat "$dir/variants.txt"
  du -sh "$dir"
  exit 0
fi

[ "$mode" = run ] || { echo "gdn_variants: the mode is build, run or pairs, not '$mode'" >&2; exit 2; }
filter='*GdnPrefill*:*Sm90*:*ContextSplit*:*GdnStateLayout*:*GdnLayoutEquivalence*'
cases="16/64:4x8192 16/32:4x8192 16/32:8x2048 4/16:1x32768" rounds=1 logs="" bench_args=""
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) filter=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --bench-args) bench_args=$2; shift 2 ;;
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
  if [ ! -x "$dir/$name/di_gpu_tests" ] && grep -q "^$name .*(bench only)$" "$dir/variants.txt"; then
    echo "tests on $name: none (built with --bench-only)"; timed+=("$name"); continue
  fi
  tests=$logs/tests-$name.log
  timeout 300 "$dir/$name/di_gpu_tests" --gtest_filter="$filter" >"$tests" 2>&1
  rc=$?
  echo "tests on $name: rc $rc, $(grep -E '^\[  PASSED|^\[  FAILED' "$tests" | tr '\n' ' ')($(( $(date +%s) - start )) s)"
  if [ $rc -eq 0 ]; then timed+=("$name"); else grep -E '^\[  FAILED' "$tests" | head -5; fi
done
order=("${timed[@]}")
for (( i = ${#timed[@]} - 1; i >= 0; i-- )); do order+=("${timed[i]}"); done
for (( r = 0; r < rounds; r++ )); do
  for name in "${order[@]}"; do
    for c in $cases; do
      heads=${c%%:*} shape=()
      [[ "$c" == *:* ]] && shape=(--shape "${c#*:}")
      timeout 120 "$dir/$name/di_gdn_bench" --backend sm90 --heads "$heads" "${shape[@]}" --qk-l2norm $bench_args \
        >>"$logs/bench-$name.txt" 2>&1 || echo "bench $name $c: rc $?"
    done
  done
done
echo "wall time $(( $(date +%s) - start )) s"
status=0
pairs=$(mktemp -d)
make_pairs "$logs" "$pairs" || status=1
for name in "${timed[@]:1}"; do
  echo; echo "$name against $ref:"
  python3 tools/bench/ab_round.py means gdn "$pairs/$name" || status=1
done
rm -rf "$pairs"
[ ${#timed[@]} -eq ${#names[@]} ] || status=1
exit $status
