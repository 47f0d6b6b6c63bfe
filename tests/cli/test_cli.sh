#!/usr/bin/env bash
# The deltainfer command line end to end: make-tiny-model, inspect, generate, score, version, and
# the errors a user meets (bad ids, missing model, corrupt checkpoint, bad options).
# usage: test_cli.sh DELTAINFER_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
failures=0
pass() { echo "ok   - $1"; }
bad() { echo "FAIL - $1"; failures=$((failures + 1)); }

# expect_fail NAME PATTERN CMD...: the command must exit non-zero and print PATTERN on stderr.
# Every refusal comes before any work: a command that runs a minute has accepted what it should not.
expect_fail() {
  local name=$1 pattern=$2 rc=0
  shift 2
  timeout 60 "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ $rc -eq 0 ]; then
    bad "$name: succeeded but should have failed"
  elif [ $rc -eq 124 ]; then
    bad "$name: still running after 60 s: it should have refused at once"
  elif ! grep -q -- "$pattern" "$work/err"; then
    bad "$name: error does not mention '$pattern': $(tail -1 "$work/err")"
  elif grep -q -i -E "segmentation|core dumped|terminate called" "$work/err"; then
    bad "$name: crashed: $(tail -1 "$work/err")"
  else
    pass "$name"
  fi
}

model="$work/tiny"
"$bin" make-tiny-model "$model" --seed 7 2>/dev/null && pass "make-tiny-model" || bad "make-tiny-model"
"$bin" make-tiny-model "$work/tiny-again" --seed 7 2>/dev/null
cmp -s "$model/model.safetensors" "$work/tiny-again/model.safetensors" && pass "make-tiny-model is deterministic" \
  || bad "make-tiny-model is deterministic"
"$bin" make-tiny-model "$work/tiny-other" --seed 8 2>/dev/null
cmp -s "$model/model.safetensors" "$work/tiny-other/model.safetensors" && bad "another seed gives other weights" \
  || pass "another seed gives other weights"

"$bin" inspect "$model" >"$work/inspect" 2>/dev/null
grep -q "GGGAGGGA" "$work/inspect" && grep -q "model.embed_tokens.weight" "$work/inspect" && pass "inspect" || bad "inspect"
"$bin" inspect --json "$model" 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)
assert j['layers'] == 8 and j['gdn_layers'] == 6 and j['attention_layers'] == 2, j
assert j['parameters'] > 17_000_000, j
" && pass "inspect --json" || bad "inspect --json"

# The CPU reference engine is deterministic whatever the prefill chunking; the GPU one rounds to bf16
# after float32 sums whose order depends on it (tests/gpu compares its chunkings with tolerances).
out=$("$bin" generate --model "$model" --device cpu --prompt-ids 1,2,3,4,5 --max-tokens 12 2>/dev/null)
n=$(echo "$out" | tr ',' '\n' | grep -c -E '^[0-9]+$' || true)
[ "$n" = 12 ] && pass "generate streams 12 token ids" || bad "generate printed '$out'"
again=$("$bin" generate --model "$model" --device cpu --prompt-ids 1,2,3,4,5 --max-tokens 12 --prefill-chunk 2 --precision bf16 2>/dev/null)
[ "$out" = "$again" ] && pass "generate: chunked prefill gives the same greedy tokens" || bad "chunked prefill changed tokens: $again"
# --device cuda runs on a GPU when one is visible, and otherwise says why it cannot.
if gpu_out=$("$bin" generate --model "$model" --device cuda --prompt-ids 1,2,3,4,5 --max-tokens 12 2>"$work/err"); then
  n=$(echo "$gpu_out" | tr ',' '\n' | grep -c -E '^[0-9]+$' || true)
  [ "$n" = 12 ] && pass "generate --device cuda streams 12 token ids" || bad "generate --device cuda printed '$gpu_out'"
else
  grep -q -E "no CUDA device is visible|built without CUDA" "$work/err" && pass "--device cuda without a GPU: clear error" ||
    bad "--device cuda failed: $(tail -1 "$work/err")"
fi
expect_fail "unknown or CPU-side GDN prefill backend" "GDN prefill backend" "$bin" generate --model "$model" \
  --gdn-prefill-backend no-such-backend --prompt-ids 1
expect_fail "--precision f32 on the GPU" "bf16 only" "$bin" generate --model "$model" --device cuda --precision f32 --prompt-ids 1
s1=$("$bin" generate --model "$model" --prompt-ids 9,8,7 --max-tokens 10 --temperature 0.8 --top-p 0.9 --seed 3 2>/dev/null)
s2=$("$bin" generate --model "$model" --prompt-ids 9,8,7 --max-tokens 10 --temperature 0.8 --top-p 0.9 --seed 3 2>/dev/null)
[ "$s1" = "$s2" ] && pass "seeded sampling is reproducible" || bad "seeded sampling differs: $s1 vs $s2"

"$bin" score --model "$model" --prompt-ids 5,6,7,8,9,10 --logits-at 0,-1 --out "$work/score.json" 2>/dev/null
python3 - "$work/score.json" <<'PY' && pass "score writes log-probs and logits" || bad "score output"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "deltainfer-score-v1"
assert j["logprobs"][0] is None and len(j["logprobs"]) == 6
assert all(lp < 0 and math.isfinite(lp) for lp in j["logprobs"][1:])
assert [r["position"] for r in j["logits"]] == [0, 5]
row = j["logits"][1]["values"]
assert len(row) == 248320
assert max(range(len(row)), key=row.__getitem__) == j["argmax"][5]
PY

"$bin" version --json | python3 -c "import json,sys; j=json.load(sys.stdin); assert len(j['commit']) in (7, 40) or j['commit']=='unknown'" \
  && pass "version --json" || bad "version --json"

# Errors: each names what was wrong, and nothing crashes.
expect_fail "missing model dir" "no such file" "$bin" generate --model "$work/nope" --prompt-ids 1
expect_fail "bad token id" "'x' is not an integer" "$bin" generate --model "$model" --prompt-ids 1,x,3
expect_fail "id outside the vocabulary" "outside the vocabulary" "$bin" generate --model "$model" --prompt-ids 1,248320
expect_fail "negative top-p" "top_p" "$bin" generate --model "$model" --prompt-ids 1 --temperature 1 --top-p -1
expect_fail "unknown precision" "precision" "$bin" generate --model "$model" --prompt-ids 1 --precision f16
expect_fail "unknown preset" "unknown preset" "$bin" make-tiny-model "$work/x" --preset huge
expect_fail "logits position outside" "outside the" "$bin" score --model "$model" --prompt-ids 1,2 --logits-at 5 --out "$work/s.json"

cp -r "$model" "$work/truncated"
truncate -s 1000000 "$work/truncated/model.safetensors"
expect_fail "truncated checkpoint" "model.safetensors" "$bin" generate --model "$work/truncated" --prompt-ids 1
cp -r "$model" "$work/badconfig"
sed -i 's/"hidden_act": "silu"/"hidden_act": "gelu"/' "$work/badconfig/config.json"
expect_fail "unsupported config value" "hidden_act" "$bin" inspect "$work/badconfig"
cp -r "$model" "$work/garbage"
head -c 4096 /dev/urandom >"$work/garbage/model.safetensors"
expect_fail "garbage checkpoint" "model.safetensors" "$bin" inspect "$work/garbage"

# Text in and out: the tokenizer files make-tiny-model copied from the build's tokenizer directory.
if [ -f "$model/tokenizer.json" ] && [ -f "$model/tokenizer_config.json" ]; then pass "make-tiny-model copies the tokenizer"
else bad "make-tiny-model copies the tokenizer"; fi
ids=$("$bin" tokenize --model "$model" "Hello world, 你好 😊" 2>/dev/null)
[ "$ids" = "$(printf '%s' "Hello world, 你好 😊" | "$bin" tokenize --model "$model" 2>/dev/null)" ] \
  && pass "tokenize: argument and stdin agree" || bad "tokenize: argument '$ids' vs stdin"
text=$("$bin" detokenize --model "$model" --ids "$ids" 2>/dev/null)
[ "$text" = "Hello world, 你好 😊" ] && pass "detokenize inverts tokenize" || bad "detokenize gave '$text'"
[ "$("$bin" tokenize --model "$model" "<|im_start|>user" 2>/dev/null)" = "248045,846" ] \
  && pass "tokenize recognises special tokens" || bad "special tokens not recognised"
[ "$("$bin" tokenize --model "$model" --no-special "<|im_start|>" 2>/dev/null | tr ',' '\n' | grep -c .)" -gt 1 ] \
  && pass "tokenize --no-special encodes them as text" || bad "--no-special"
[ "$("$bin" detokenize --model "$model" --ids 248045,846 --skip-special 2>/dev/null)" = "user" ] \
  && pass "detokenize --skip-special" || bad "detokenize --skip-special"

by_text=$("$bin" generate --model "$model" --prompt "Hello world" --max-tokens 6 --print-ids 2>/dev/null)
by_ids=$("$bin" generate --model "$model" --prompt-ids "$("$bin" tokenize --model "$model" "Hello world" 2>/dev/null)" --max-tokens 6 2>/dev/null)
[ -n "$by_text" ] && [ "$by_text" = "$by_ids" ] && pass "generate --prompt equals generate --prompt-ids of its tokens" \
  || bad "generate --prompt '$by_text' vs ids '$by_ids'"
streamed=$("$bin" generate --model "$model" --prompt "Hello world" --max-tokens 6 2>/dev/null)
decoded=$("$bin" detokenize --model "$model" --ids "$by_text" --skip-special 2>/dev/null)
[ "$streamed" = "$decoded" ] && pass "generate streams the decoded text" || bad "streamed '$streamed' vs '$decoded'"
chat_ids=$("$bin" generate --model "$model" --prompt "Hi" --chat --no-thinking --max-tokens 4 --print-ids 2>/dev/null)
printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$work/chat_prompt.txt"
templ_ids=$("$bin" generate --model "$model" --prompt-ids "$("$bin" tokenize --model "$model" <"$work/chat_prompt.txt" 2>/dev/null)" --max-tokens 4 2>/dev/null)
[ -n "$chat_ids" ] && [ "$chat_ids" = "$templ_ids" ] && pass "generate --chat renders the chat format" \
  || bad "generate --chat '$chat_ids' vs template '$templ_ids'"
lines=$(printf 'hello there\n/reset\nsecond turn\n' | "$bin" chat --model "$model" --max-tokens 5 2>"$work/chat.err" | wc -l)
[ "$lines" = 2 ] && pass "chat answers each turn" || bad "chat printed $lines lines: $(tail -2 "$work/chat.err")"

"$bin" make-tiny-model "$work/no-tok" --no-tokenizer 2>/dev/null
expect_fail "text prompt without a tokenizer" "tokenizer.json" "$bin" generate --model "$work/no-tok" --prompt "hi"
expect_fail "detokenize id out of range" "248320" "$bin" detokenize --model "$model" --ids 5,248320
cp -r "$model" "$work/badtok"
head -c 100000 "$model/tokenizer.json" >"$work/badtok/tokenizer.json"
expect_fail "truncated tokenizer.json" "tokenizer.json" "$bin" tokenize --model "$work/badtok" "hi"
printf 'a\xff\xfeb' >"$work/invalid.txt"
expect_fail "invalid UTF-8 input" "UTF-8" "$bin" tokenize --model "$model" "$(cat "$work/invalid.txt")"

# bench-offline: every request completes with its output length; the report has every request.
if "$bin" bench-offline --model "$model" --device cpu --num-requests 12 --input-len 70 --output-len 5 --concurrency 4 \
    --max-num-seqs 4 --max-num-batched-tokens 64 --json "$work/bench.json" >"$work/bench.out" 2>"$work/bench.err" &&
   python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['output_tokens'] == 60 and len(r['requests']) == 12, r['output_tokens']
assert all(q['tokens'] == 5 and q['ttft_s'] > 0 and q['latency_s'] >= q['ttft_s'] for q in r['requests'])
assert r['ttft_s']['p50'] <= r['ttft_s']['p99'] and r['workload']['concurrency'] == 4 and r['build']['version']
" "$work/bench.json" && grep -q "TTFT" "$work/bench.out"; then
  pass "bench-offline"
else
  bad "bench-offline: $(tail -2 "$work/bench.err")"
fi
expect_fail "bench-offline with no requests" "must be >= 1" "$bin" bench-offline --model "$model" --device cpu --num-requests 0
expect_fail "bench-offline with no sequences" "max_num_seqs must be >= 1" "$bin" bench-offline --model "$model" \
  --device cpu --max-num-seqs 0

# artifacts verify: a bundle is checked against this build's pins, never only against its own manifest.
mkdir -p "$work/forged-bundle"
echo '{"bundle": "flashinfer-gdn-sm90", "sha256": {}}' >"$work/forged-bundle/manifest.json"
echo "// not the kernel" >"$work/forged-bundle/fi_gdn_sm90_vk.ptx"
expect_fail "artifacts verify: forged bundle" "fi_gdn_sm90_vk.ptx has SHA-256" "$bin" artifacts verify "$work/forged-bundle"
expect_fail "artifacts verify: missing artifacts" "fi_gdn_sm90_kv.so is missing" "$bin" artifacts verify "$work/forged-bundle"
expect_fail "artifacts verify: not a directory" "is not a directory" "$bin" artifacts verify "$work/nope"
expect_fail "--gdn-artifacts must exist" "gdn-artifacts" "$bin" generate --model "$model" --prompt-ids 1 \
  --gdn-artifacts "$work/nope"

# bench ab: configurations checked before anything runs; a dirty checkout refused, then recorded.
# A GPU round declares its tree's commit through DI_SOURCE_COMMIT, which would stand in for the git
# checks these cases are about: only the case that declares one keeps it.
unset DI_SOURCE_COMMIT DI_SOURCE_DIRTY
repo=$(cd "$(dirname "$0")/../.." && pwd)
expect_fail "bench ab: unknown key" "unknown key 'colour'" "$bin" bench ab --a colour=red --b name=x --model "$model"
expect_fail "bench ab: one name twice" "both configurations are named" "$bin" bench ab --a name=x --b name=x --model "$model"
expect_fail "bench ab: bad env" "env=9LIVES=x is not env=NAME=VALUE" "$bin" bench ab --a name=x,env=9LIVES=x --b name=y --model "$model"
expect_fail "bench ab: env twice" "env=DI_EARLY_LAUNCH is set twice" "$bin" bench ab \
  --a name=x,env=DI_EARLY_LAUNCH=0,env=DI_EARLY_LAUNCH=1 --b name=y --model "$model"
expect_fail "bench ab: bad scenario" "neither prefill" "$bin" bench ab --a name=x --b name=y --model "$model" --scenarios warm-up
git init -q "$work/other-repo" && git -C "$work/other-repo" -c user.email=t@t -c user.name=t commit -q --allow-empty -m x
expect_fail "bench ab: binary of another commit" "was built from commit" "$bin" bench ab --model "$model" \
  --a "name=x,device=cpu,source=$work/other-repo" --b name=y,device=cpu
DI_SOURCE_COMMIT=0123456789abcdef expect_fail "bench ab: declared commit of a copied tree" \
  "DI_SOURCE_COMMIT declares 0123456789abcdef" "$bin" bench ab --model "$model" --a name=x,device=cpu --b name=y,device=cpu
built=$("$bin" version --json | python3 -c "import json, sys; j = json.load(sys.stdin); print(j['commit'], j['dirty'])")
if [ "$built" = "$(git -C "$repo" rev-parse HEAD 2>/dev/null) False" ]; then
  # A checkout at the binary's commit with one file more: refused, then measured with --allow-dirty.
  git -C "$repo" worktree add -q --detach "$work/checkout" HEAD
  echo "local change" >"$work/checkout/untracked-note.txt"
  expect_fail "bench ab: dirty checkout" "untracked-note.txt" "$bin" bench ab --model "$model" \
    --a "name=bf16,device=cpu,source=$work/checkout" --b "name=f32,device=cpu,precision=f32,source=$work/checkout"
  if "$bin" bench ab --model "$model" --a "name=bf16,device=cpu,source=$work/checkout" \
      --b "name=f32,device=cpu,precision=f32,source=$work/checkout,env=DI_EARLY_LAUNCH=0" --scenarios prefill-24x1,serve-8-4x2 --rounds 1 \
      --allow-dirty --out "$work/ab" >"$work/ab.out" 2>"$work/ab.err" &&
     python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert [s['name'] for s in r['scenarios']] == ['prefill-24x1', 'serve-8-4x2']
for s in r['scenarios']:
    assert [x['config'] for x in s['runs']] == ['a', 'b', 'b', 'a'], s['runs']
    assert all(x['sample']['total_tokens_per_s'] > 0 for x in s['runs'])
    c = s['comparison']['total_tokens_per_s']
    assert c['ci95'][0] <= c['ratio_b_over_a'] <= c['ci95'][1] and c['verdict']
assert 'tpot_p50_ms' in r['scenarios'][1]['comparison'] and 'tpot_p50_ms' not in r['scenarios'][0]['comparison']
p = r['provenance']['a']
assert p['dirty'] and 'untracked-note.txt' in p['changed_files'] and len(p['diff_sha256']) == 64
assert r['configs']['a']['env'] == {} and r['configs']['b']['env'] == {'DI_EARLY_LAUNCH': '0'}, r['configs']
" "$work/ab/report.json" && grep -q "B/A (95% interval)" "$work/ab/report.md" && grep -q "environment: DI_EARLY_LAUNCH=0" "$work/ab/report.md" && [ "$(ls "$work/ab/runs" | wc -l)" -eq 12 ]; then
    pass "bench ab: interleaved runs, intervals, provenance of a dirty checkout"
  else
    bad "bench ab: $(tail -2 "$work/ab.err")"
  fi
  git -C "$repo" worktree remove --force "$work/checkout"
else
  echo "skip - bench ab runs: the binary ($built) is not built from this checkout's HEAD"
fi

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
