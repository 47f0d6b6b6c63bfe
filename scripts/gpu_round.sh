#!/usr/bin/env bash
# The GPU round, run on the GPU machine in one go:
#   1. build with CUDA for sm_90a (the build dependencies come as Debian packages carried in
#      .device-deps/, see scripts/gpu_deps.sh), or take a build directory made elsewhere (--prebuilt);
#   2. every GPU test (ctest -R '^gpu\.'), the command-line test (which then runs on the GPU), and
#      with --all-tests the CPU tests too;
#   3. the benchmarks: the GDN kernel lab, the engine end to end on the 4b-geometry preset, the same
#      model through Hugging Face transformers, and the time from a cold process to the first token;
#   4. a short table printed last. Full logs and JSON reports go to LOG_DIR.
# usage: DI_SOURCE_COMMIT=<sha> DI_SOURCE_DIRTY=<true|false> \
#          scripts/gpu_round.sh [--prebuilt BUILD_DIR] [--all-tests] [--tests REGEX] [--no-tests]
#                               [--bench LIST] [--no-bench] [LOG_DIR]
#        --tests REGEX runs only the ctest names matching REGEX; --bench LIST picks benchmarks from
#        gdn,linear,peers,engine,offline,tp,ab,serve,cli,hf (default: gdn,linear,peers,engine,offline,tp,cli,hf; tp needs 2 or
#        more GPUs; serve needs the wheels of .whl/serve-bench); DI_CMAKE_ARGS adds CMake arguments (e.g.
#        -DCMAKE_CUDA_FLAGS=-lineinfo for a profiler); DI_OFFLINE_CONCURRENCY picks the offline
#        benchmark's concurrency levels (default "1 8 16 64");
#        (LOG_DIR defaults to $OUT, else gpu-logs; the two variables, read where the tree was sent
#        from, go into every binary's provenance because the copy's .git is not that tree's)
set -uo pipefail
cd "$(dirname "$0")/.."
prebuilt="" all_tests=0 bench=1 tests=1 logs="" test_filter="" benches="gdn,linear,peers,engine,offline,tp,cli,hf"
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt=$2; shift 2 ;;
    --all-tests) all_tests=1; shift ;;
    --no-bench) bench=0; shift ;;
    --no-tests) tests=0; shift ;;
    --tests) test_filter=$2; shift 2 ;;
    --bench) benches=$2; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) logs=$1; shift ;;
  esac
done
logs=${logs:-${OUT:-gpu-logs}}
mkdir -p "$logs"
start=$(date +%s)
rows=()
row() { rows+=("| $1 | $2 |"); }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  # The tree arrives without its history: the caller passes the commit it was sent from.
  echo "source commit ${DI_SOURCE_COMMIT:-unknown (set DI_SOURCE_COMMIT)} dirty ${DI_SOURCE_DIRTY:-unknown}"
} >"$logs/machine.txt" 2>&1
row machine "$(sed -n 2p "$logs/machine.txt")"

# 1. Build.
build=${prebuilt:-build-gpu}
if [ -z "$prebuilt" ]; then
  source scripts/gpu_build_env.sh
  unpack_device_deps
  [ -f .deps/qwen35-tokenizer/tokenizer.json ] || echo "warning: .deps/qwen35-tokenizer missing: carry it" >&2
  t=$(date +%s)
  # The HTTP server (cpp-httplib, a shared library from the carried packages) only for its benchmark.
  server_flag=-DDI_WITH_SERVER=OFF
  [[ ",$benches," == *",serve,"* ]] && server_flag=-DDI_WITH_SERVER=ON
  if configure_gpu_build . build-gpu $server_flag ${DI_CMAKE_ARGS:-} >"$logs/configure.log" 2>&1 &&
     cmake --build build-gpu --parallel "$(nproc)" >"$logs/build.log" 2>&1; then
    row "build (CUDA sm_90a)" "ok in $(( $(date +%s) - t )) s"
  else
    row "build (CUDA sm_90a)" "FAILED (configure.log, build.log)"
    tail -30 "$logs/build.log" 2>/dev/null
    printf '%s\n' "" "| step | result |" "|---|---|" "${rows[@]}"
    exit 1
  fi
fi
failed=0

# The 4b-geometry checkpoint, written once for the full-size test and the benchmarks.
want() { [[ ",$benches," == *",$1,"* ]] && [ $bench -eq 1 ]; }
model4b=/tmp/deltainfer-4b-geometry
need4b=0
{ [ $tests -eq 1 ] && [ -z "$test_filter" ]; } && need4b=1
{ want engine || want offline || want serve || want ab || want cli || want hf; } && need4b=1
if [ $need4b -eq 1 ] && [ ! -f "$model4b/model.safetensors" ]; then
  t=$(date +%s)
  "$build/deltainfer" make-tiny-model --preset 4b-geometry --no-tokenizer "$model4b" >"$logs/make-4b.log" 2>&1 ||
    { echo "make-tiny-model 4b-geometry failed" >&2; failed=1; }
  row "4b-geometry checkpoint" "written in $(( $(date +%s) - t )) s"
fi
[ -f "$model4b/model.safetensors" ] && export DI_4B_MODEL_DIR=$model4b

# With several GPUs: the 27b-geometry model with 16 of its 64 layers (every shape of the 27B, a quarter
# of its depth, so that it is written and loaded in the round's time) for the tensor-parallel gate
# and benchmark.
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
model27b=/tmp/deltainfer-27b-geometry-16-layers
if [ "$gpus" -ge 2 ] && { want tp || [ $tests -eq 1 ]; } && [ ! -f "$model27b/model.safetensors" ]; then
  t=$(date +%s)
  "$build/deltainfer" make-tiny-model --preset 27b-geometry --layers 16 --no-tokenizer "$model27b" \
    >"$logs/make-27b.log" 2>&1 || { echo "make-tiny-model 27b-geometry failed" >&2; failed=1; }
  row "27b-geometry checkpoint (16 layers)" "written in $(( $(date +%s) - t )) s"
fi
[ -f "$model27b/model.safetensors" ] && export DI_27B_MODEL_DIR=$model27b

# The flashinfer-sm90 GDN backend's bundle, when carried (tools/artifacts/flashinfer_gdn_sm90/generate.sh
# writes it; carry build-artifacts/flashinfer-gdn-sm90): checked against the build's pins, then named
# to every test and benchmark through DI_GDN_ARTIFACTS. Without it that backend refuses, saying why.
bundle=build-artifacts/flashinfer-gdn-sm90
if [ -d "$bundle" ]; then
  if "$build/deltainfer" artifacts verify "$bundle" >"$logs/artifacts-verify.txt" 2>&1; then
    export DI_GDN_ARTIFACTS=$PWD/$bundle
    row "flashinfer-gdn-sm90 bundle" "matches the pins (DI_GDN_ARTIFACTS set)"
    # The external kernel's machine code, as for sm90 below.
    if command -v cuobjdump >/dev/null; then
      for layout in vk kv; do
        cuobjdump -sass "$bundle/fi_gdn_sm90_$layout.cubin" >"$logs/fi_gdn_sm90_$layout.sass" 2>&1
        cuobjdump -res-usage "$bundle/fi_gdn_sm90_$layout.cubin" >"$logs/fi_gdn_sm90_$layout.res-usage.txt" 2>&1
      done
      row "flashinfer-sm90 SASS (vk)" "$(grep -c HGMMA "$logs/fi_gdn_sm90_vk.sass") HGMMA, $(grep -c 'STL\|LDL' "$logs/fi_gdn_sm90_vk.sass") local loads/stores; $(grep -o 'REG:[0-9]*' "$logs/fi_gdn_sm90_vk.res-usage.txt" | head -1)"
    fi
  else
    row "flashinfer-gdn-sm90 bundle" "REFUSED (artifacts-verify.txt)"; failed=1
  fi
fi

# 2. Tests.
if [ $tests -eq 1 ]; then
  filter='^gpu\.|^cli\.end_to_end$'
  [ $all_tests -eq 1 ] && filter='.'
  [ -n "$test_filter" ] && filter=$test_filter
  t=$(date +%s)
  ctest --test-dir "$build" --output-on-failure --no-tests=error -R "$filter" -E '^tokenizer\.hf_equality$' \
    -V >"$logs/ctest.log" 2>&1 || failed=1
  row tests "$(grep -Eo '[0-9]+% tests passed(, [0-9]+ tests failed)? out of [0-9]+' "$logs/ctest.log" || echo 'no tests ran') ($(( $(date +%s) - t )) s)"
  skipped=$(grep -c '\*\*\*Skipped' "$logs/ctest.log" || true)
  row "tests skipped" "$skipped"
  grep -E '^\s*[0-9]+ - gpu\.|Failed|\*\*\*' "$logs/ctest.log" | head -20 >"$logs/failures.txt" || true
fi

# The sm90 GDN kernel's machine code: tensor-core instructions, registers, spills.
if command -v cuobjdump >/dev/null; then
  obj=$(find "$build" -name 'sm90_prefill.cu.o' | head -1)
  if [ -n "$obj" ]; then
    cuobjdump -sass "$obj" >"$logs/sm90_prefill.sass" 2>&1
    cuobjdump -res-usage "$obj" >"$logs/sm90_prefill.res-usage.txt" 2>&1
    row "sm90 GDN SASS" "$(grep -c HGMMA "$logs/sm90_prefill.sass") HGMMA, $(grep -c 'STL\|LDL' "$logs/sm90_prefill.sass") local loads/stores; $(grep -o 'REG:[0-9]*' "$logs/sm90_prefill.res-usage.txt" | head -1)"
  fi
fi

# 3. Benchmarks.
if want gdn; then
  # Raw q and k with DI_GDN_QK_L2NORM, as the engine calls the prefill backends.
  if "$build/bench/di_gdn_bench" --qk-l2norm --json "$logs/gdn_kernels.json" >"$logs/gdn_kernels.txt" 2>&1; then
    row "GDN kernel lab" "ok (gdn_kernels.txt)"
  else
    row "GDN kernel lab" "FAILED (gdn_kernels.txt)"; failed=1
  fi
fi
if want linear; then
  if "$build/bench/di_linear_bench" --json "$logs/linear.json" >"$logs/linear.txt" 2>&1; then
    row "decode-sized linear layers" "ok (linear.txt)"
  else
    row "decode-sized linear layers" "FAILED (linear.txt)"; failed=1
  fi
fi
if want peers && [ -f tools/bench/gdn_peers.py ]; then
  peers=/tmp/deltainfer-gdn-peers
  rm -rf "$peers" && mkdir -p "$peers"
  if [ -f .whl/peers/site.tar.xz ]; then  # every peer, FlashQLA's stack too (tools/bench/pack_peer_site.sh)
    tar xJf .whl/peers/site.tar.xz -C "$peers" && peers=$peers/site
  elif ls .whl/gdn-peers/*.whl >/dev/null 2>&1; then
    pip install --no-index --no-deps --target "$peers" .whl/gdn-peers/*.whl >"$logs/peers-install.log" 2>&1
  fi
  # FlashInfer's GDN module built ahead (gdn_peers.py --prebuild-flashinfer), carried as a folder or a tgz of it.
  [ -f .whl/fi-cache.tgz ] && [ ! -d .whl/flashinfer-cache ] && tar xzf .whl/fi-cache.tgz
  fi_workspace=()
  [ -d .whl/flashinfer-cache ] && fi_workspace=(--flashinfer-workspace .whl/flashinfer-cache)
  if PYTHONPATH=$peers CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} python3 tools/bench/gdn_peers.py \
      --lib "$build/libdeltainfer_gdn.so" --out "$logs" "${fi_workspace[@]}" \
      ${DI_PEERS_ARGS:-} >"$logs/gdn_peers.txt" 2>&1; then
    row "GDN peer comparison" "ok (gdn_peers.md)"
  else
    row "GDN peer comparison" "FAILED (gdn_peers.txt)"; failed=1
  fi
  # FlashInfer's current release (a package of the same name as the lock's 0.6.13, so a command of its
  # own), when the parts tools/bench/pack_flashinfer_dsl_site.sh cuts were all carried (each in its own
  # call to the warm machine: docs/benchmarks/gdn-peers.md, "FlashInfer's current release").
  if ls .whl/fi-dsl/part-*/site.tar.xz.* >/dev/null 2>&1; then
    fi_dsl=/tmp/deltainfer-fi-dsl
    rm -rf "$fi_dsl" && mkdir -p "$fi_dsl"
    if cat .whl/fi-dsl/part-*/site.tar.xz.* | xz -d | tar x -C "$fi_dsl" 2>"$logs/fi-dsl-unpack.log" &&
       PYTHONPATH=$fi_dsl/site:$fi_dsl/site/nvidia_cutlass_dsl/dsl_packages CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
         python3 tools/bench/gdn_peers.py --lib "$build/libdeltainfer_gdn.so" --kernels 'deltainfer:sm90,flashinfer' \
         --out "$logs/peers-flashinfer-current" ${DI_PEERS_ARGS:-} >"$logs/gdn_peers_flashinfer_current.txt" 2>&1; then
      row "GDN peers: FlashInfer's current release" "ok (peers-flashinfer-current/gdn_peers.md)"
    else
      row "GDN peers: FlashInfer's current release" "FAILED (fi-dsl-unpack.log: a part missing?, gdn_peers_flashinfer_current.txt)"; failed=1
    fi
  fi
fi
if want engine; then
  cat "$model4b/model.safetensors" >/dev/null  # into the page cache: the start-to-first-token case
  if "$build/bench/di_engine_bench" --model "$model4b" --json "$logs/engine.json" >"$logs/engine.txt" 2>&1; then
    row "engine end to end (4b-geometry)" "ok (engine.txt)"
  else
    row "engine end to end (4b-geometry)" "FAILED (engine.txt)"; failed=1
  fi
fi
if want offline; then
  # The runtime's serving figures: 1024 tokens in, 256 out, at concurrency 1, 8, 16 and 64 through the
  # engine in process (docs/runtime.md); every report in offline.json, one line each.
  : >"$logs/offline.txt"
  for conc in ${DI_OFFLINE_CONCURRENCY:-1 8 16 64}; do
    n=$(( conc < 4 ? 4 : 2 * conc ))
    out=/tmp/offline_c$conc.txt
    if "$build/deltainfer" bench-offline --model "$model4b" --device cuda --num-requests $n --input-len 1024 \
        --output-len 256 --concurrency $conc --max-num-seqs 64 --json "/tmp/offline_c$conc.json" >"$out" 2>&1; then
      row "bench-offline 1024/256, concurrency $conc" "$(grep 'output tokens/s' "$out")"
    else
      row "bench-offline 1024/256, concurrency $conc" "FAILED (offline.txt)"; failed=1
    fi
    cat "$out" >>"$logs/offline.txt"
  done
  python3 -c "import json, sys; json.dump([json.load(open(f)) for f in sys.argv[1:]], open('$logs/offline.json', 'w'), indent=1)" \
    /tmp/offline_c*.json 2>>"$logs/offline.txt" || true
fi
if want tp && [ "$gpus" -ge 2 ]; then
  # Tensor parallelism against one GPU, interleaved 1, N, N, 1 for every size the machine has:
  # prefill (2048 tokens in, 1 out, one at a time) and serving (1024 in, 256 out, concurrency 1 and
  # 16) through bench-offline; every report in tp.json, their output in tp-runs.txt, a table in tp.txt.
  : >"$logs/tp.txt"
  : >"$logs/tp-runs.txt"
  rm -f /tmp/tp_*.json
  sizes=""
  for n in 2 4 8; do [ "$gpus" -ge $n ] && sizes="$sizes $n"; done
  i=0
  for model in "$model4b" "$model27b"; do
    [ -f "$model/model.safetensors" ] || continue
    for n in $sizes; do
      for tp in 1 $n $n 1; do
        for scenario in "2048 1 1 8" "1024 256 1 2" "1024 256 16 32"; do
          set -- $scenario
          i=$((i + 1))
          if ! "$build/deltainfer" bench-offline --model "$model" --device cuda --tensor-parallel-size $tp \
              --input-len $1 --output-len $2 --concurrency $3 --num-requests $4 --max-num-seqs 64 \
              --json "/tmp/tp_$i.json" >>"$logs/tp-runs.txt" 2>&1; then
            row "bench-offline tp $tp $(basename "$model") $scenario" "FAILED (tp-runs.txt)"; failed=1
          fi
        done
      done
    done
  done
  python3 - "$logs" /tmp/tp_*.json <<'PY' 2>>"$logs/tp-runs.txt" || true
import json, sys
logs, files = sys.argv[1], sys.argv[2:]
reports = [json.load(open(f)) for f in sorted(files, key=lambda f: int(f.split('_')[-1].split('.')[0]))]
json.dump(reports, open(f"{logs}/tp.json", "w"), indent=1)
with open(f"{logs}/tp.txt", "a") as out:
    out.write("| model | TP | in/out x conc | output tok/s | total tok/s | TTFT p50 ms | TPOT p50 ms |\n|---|---|---|---|---|---|---|\n")
    for r in reports:
        w = r["workload"]
        out.write(f"| {r['model'].split('/')[-1]} | {r['tensor_parallel_size']} | {w['input_len']}/{w['output_len']} x {w['concurrency']} "
                  f"| {r['output_tokens_per_s']:.1f} | {r['total_tokens_per_s']:.1f} | {1e3 * r['ttft_s']['p50']:.1f} "
                  f"| {1e3 * r['tpot_s']['p50']:.2f} |\n")
PY
  row "tensor parallelism (bench-offline)" "$(grep -c '^| deltainfer' "$logs/tp.txt") runs (tp.txt)"
fi
if want ab; then
  # deltainfer bench ab on the production path: two GDN prefill backends, DI_AB_A against DI_AB_B
  # (default sm90 against flashinfer-sm90, the latter from the carried bundle), every scenario of the
  # harness (or DI_AB_SCENARIOS), DI_AB_ROUNDS rounds (default 3) of A, B, B, A; the report (JSON,
  # Markdown, per-round plot) in ab-A-vs-B/.
  ab_a=${DI_AB_A:-sm90} ab_b=${DI_AB_B:-flashinfer-sm90}
  ab_config() {
    local c="name=$1,device=cuda,gdn-prefill-backend=$1"
    # The bundle relative to the tree (the runs start here), so that no machine path enters the report.
    [ "$1" = flashinfer-sm90 ] && c="$c,gdn-artifacts=${DI_GDN_ARTIFACTS#"$PWD"/}"
    echo "$c"
  }
  ab_dir="ab-$ab_a-vs-$ab_b"
  if [[ " $ab_a $ab_b " == *" flashinfer-sm90 "* ]] && [ -z "${DI_GDN_ARTIFACTS:-}" ]; then
    row "bench ab $ab_a vs $ab_b" "not run: no flashinfer-gdn-sm90 bundle carried"
  elif "$build/deltainfer" bench ab --model "$model4b" --out "$logs/$ab_dir" --rounds "${DI_AB_ROUNDS:-3}" \
      ${DI_AB_SCENARIOS:+--scenarios "$DI_AB_SCENARIOS"} --a "$(ab_config "$ab_a")" --b "$(ab_config "$ab_b")" \
      >"$logs/$ab_dir.txt" 2>"$logs/$ab_dir.err"; then
    row "bench ab $ab_a vs $ab_b" "ok ($ab_dir/report.md)"
  else
    row "bench ab $ab_a vs $ab_b" "FAILED ($ab_dir.err)"; failed=1
  fi
fi
if want cli; then
  t0=$(date +%s.%N)
  "$build/deltainfer" generate --model "$model4b" --device cuda --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 1 \
    >"$logs/cli-first-token.txt" 2>&1 && row "CLI start to first token (4b, page cache)" \
    "$(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $t0 }") s" || row "CLI start to first token" "FAILED (cli-first-token.txt)"
fi
if want hf; then
  if python3 tools/bench/hf_engine_bench.py --model "$model4b" --json "$logs/hf_engine.json" >"$logs/hf_engine.txt" 2>&1; then
    row "transformers end to end (4b-geometry)" "ok (hf_engine.txt)"
  else
    row "transformers end to end (4b-geometry)" "FAILED (hf_engine.txt)"
  fi
fi

row "wall time" "$(( $(date +%s) - start )) s"
echo
for f in gdn_kernels.txt linear.txt gdn_peers.txt engine.txt offline.txt tp.txt serve.txt hf_engine.txt; do [ -f "$logs/$f" ] && { echo "== $f"; cat "$logs/$f"; }; done
for f in "$logs"/ab-*/report.md; do [ -f "$f" ] && { echo "== ${f#"$logs"/}"; cat "$f"; }; done
[ -s "$logs/failures.txt" ] && { echo "== failures"; cat "$logs/failures.txt"; }
printf '%s\n' "" "| step | result |" "|---|---|" "${rows[@]}"
exit $failed
