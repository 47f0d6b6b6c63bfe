#!/usr/bin/env python3
"""A float64 model of one GDN prefill chunk as the sm90 kernel computes it, with the rounding of each
tensor-core operand chosen per configuration, against the float64 token recurrence.

What it answers: which operand roundings (bf16, a bf16 hi + lo pair, fp16) the error against the
oracle can afford, before a kernel is written or a GPU round spent. Inputs are drawn as the GPU
operator tests draw them (tests/gpu/test_gdn_prefill.cpp, make_batch): unit q and k rows in bf16,
v ~ N(0, 1) in bf16, decays mostly in [0.5, 1] with rare strong ones, beta = sigmoid(N(0, 1.5)), a
random initial state. Accumulation is float64 (the kernel's f32 accumulators add far less error than
its operand roundings); S is a single bf16 operand of K S and Q S in every configuration.

usage: gdn_chunk_model.py [--seed N] [--tokens T] [--gate-scale S] [--split-tokens L] [--key-norm-spread S]
"""
import argparse

import numpy as np

K = V = 128
CHUNK = 64


def to_bf16(x):
    """Round to bfloat16 (nearest, ties to even), returned as float64."""
    bits = np.asarray(x, np.float32).copy().view(np.uint32)
    bits += 0x7FFF + ((bits >> 16) & 1)
    bits &= 0xFFFF0000
    return bits.view(np.float32).astype(np.float64)


def to_f16(x):
    return np.asarray(x, np.float64).astype(np.float16).astype(np.float64)


def to_tf32(x):
    """Round to tf32 (10-bit mantissa, nearest, ties away from zero: cvt.rna), returned as float64."""
    bits = np.asarray(x, np.float32).copy().view(np.uint32)
    bits += 0x1000
    bits &= 0xFFFFE000
    return bits.view(np.float32).astype(np.float64)


def blocked_inverse(a, rounding, base=16, stored=None):
    """(I + L)^-1 as the kernels make it: `base` x `base` diagonal blocks exactly (float32), then merges
    of adjacent blocks, T_hl = -T_hh (L_hl T_ll), with both products' operands rounded by `rounding`.
    With `stored`, every level's results (the diagonal blocks, L_hl T_ll, T_hl) are rounded by it as
    well, as a kernel that keeps them in shared memory in a narrower type does."""
    keep = stored or (lambda x: x)
    n = a.shape[0]
    t = np.zeros((n, n))
    for b in range(0, n, base):
        e = min(b + base, n)
        t[b:e, b:e] = keep(np.linalg.inv(a[b:e, b:e]).astype(np.float32))
    size = base
    while size < n:
        for b in range(0, n, 2 * size):
            mid, e = min(b + size, n), min(b + 2 * size, n)
            if mid >= e:
                continue
            y = keep(rounding(a[mid:e, b:mid]) @ rounding(t[b:mid, b:mid]))
            t[mid:e, b:mid] = keep((-(rounding(t[mid:e, mid:e]) @ rounding(y))).astype(np.float32))
        size *= 2
    return t


def inverse_of(l_mat, form, key_norms, stats):
    """(I + L)^-1 by one of the blocked forms. Forms ending in ", similar system" invert L' = N L N^-1
    (N = diag(1 / |k|) of the raw keys, as sm90 does to spare its auxiliary warpgroup a barrier for the
    key norms) and map the result back; L' has the same rounding as L in relative terms but entries
    scaled by |k_c| / |k_r|, which is what a narrow type's range has to hold."""
    n = len(l_mat)
    similar = form.endswith(", similar system")
    base_form = form[:-len(", similar system")] if similar else form
    scale = key_norms[None, :] / key_norms[:, None] if similar else np.ones((n, n))
    a = np.eye(n) + l_mat * scale
    with np.errstate(over="ignore", invalid="ignore"):
        if base_form == "tf32 merges":
            t = blocked_inverse(a, to_tf32)
        elif base_form == "fp16 merges":  # fp16 operands (11 bits, as tf32's), f32 results
            t = blocked_inverse(a, to_f16)
        elif base_form == "fp16 levels":  # FlashInfer 0.7.4: the matrix, every level's results in fp16, 8 x 8 blocks
            t = blocked_inverse(to_f16(a), to_f16, base=8, stored=to_f16)
        else:
            raise ValueError(form)
    key = f"{form}: largest |entry| of I + L, of the inverse"
    seen = stats.get(key, (0.0, 0.0))
    stats[key] = (max(seen[0], np.abs(a).max()), max(seen[1], np.nanmax(np.abs(t)) if np.isfinite(t).any() else np.inf))
    if not np.isfinite(t).all():
        stats[f"{form}: chunks whose inverse overflowed"] = stats.get(f"{form}: chunks whose inverse overflowed", 0) + 1
    return t / scale


def hi_lo(x, rounding):
    hi = rounding(x)
    return hi, rounding(x - hi)


def draw(rng, tokens):
    def unit_rows():
        x = rng.standard_normal((tokens, K))
        return to_bf16(x / np.linalg.norm(x, axis=1, keepdims=True))

    q, k = unit_rows(), unit_rows()
    v = to_bf16(rng.standard_normal((tokens, V)))
    u = rng.random(tokens)
    g = np.where(u < 0.005, -20 - 130 * rng.random(tokens),
                 np.where(u < 0.035, -3 - 9 * rng.random(tokens), np.log(0.5 + 0.5 * rng.random(tokens))))
    g = g.astype(np.float32).astype(np.float64)
    beta = (1 / (1 + np.exp(-1.5 * rng.standard_normal(tokens)))).astype(np.float32).astype(np.float64)
    state = rng.normal(0, 0.25, (K, V)).astype(np.float32).astype(np.float64)
    return q, k, v, g, beta, state


def recurrence(q, k, v, g, beta, state, scale):
    s = state.copy()
    out = np.empty_like(v)
    for t in range(len(q)):
        s *= np.exp(g[t])
        s += np.outer(k[t], beta[t] * (v[t] - k[t] @ s))
        out[t] = scale * (q[t] @ s)
    return out, s


def vnew_product(x, t_inv, form):
    """Vnew = Tinv X with the operands rounded as `form` says."""
    if form == "bf16 hi+lo, three products":  # X_hi T_hi + X_hi T_lo + X_lo T_hi (the lo x lo term dropped)
        xh, xl = hi_lo(x, to_bf16)
        th, tl = hi_lo(t_inv, to_bf16)
        return th @ xh + tl @ xh + th @ xl
    if form == "fp16 Tinv, fp16 hi+lo X, two products":
        xh, xl = hi_lo(x, to_f16)
        return to_f16(t_inv) @ (xh + xl)
    if form == "bf16 Tinv, bf16 hi+lo X, two products":
        xh, xl = hi_lo(x, to_bf16)
        return to_bf16(t_inv) @ (xh + xl)
    if form == "single bf16":
        return to_bf16(t_inv) @ to_bf16(x)
    if form == "single fp16":
        return to_f16(t_inv) @ to_f16(x)
    raise ValueError(form)


def output_product(p, vnew, form):
    if form == "bf16 P, bf16 hi+lo Vnew, two products":
        vh, vl = hi_lo(vnew, to_bf16)
        return to_bf16(p) @ (vh + vl)
    if form == "fp16 P and Vnew, one product":
        return to_f16(p) @ to_f16(vnew)
    if form == "single bf16":
        return to_bf16(p) @ to_bf16(vnew)
    raise ValueError(form)


def state_operand(w, form):
    if form == "bf16 hi+lo":
        wh, wl = hi_lo(w, to_bf16)
        return wh + wl
    if form == "single bf16":
        return to_bf16(w)
    raise ValueError(form)


def chunked(q, k, v, g, beta, state, scale, forms, stats=None, key_norms=None):
    stats = {} if stats is None else stats
    key_norms = np.ones(len(k)) if key_norms is None else key_norms
    s = state.copy()
    out = np.empty_like(v)
    for c0 in range(0, len(q), CHUNK):
        rows = slice(c0, min(c0 + CHUNK, len(q)))
        qc, kc, vc, gc, bc = q[rows], k[rows], v[rows], g[rows], beta[rows]
        n = len(qc)
        big_g = np.cumsum(gc)
        decay = np.exp(np.minimum(big_g[:, None] - big_g[None, :], 0))
        p = scale * decay * (qc @ kc.T) * np.tril(np.ones((n, n)))
        l_mat = np.tril(bc[:, None] * decay * (kc @ kc.T), -1)
        if forms.get("inverse") == "tf32 merges":
            t_inv = blocked_inverse(np.eye(n) + l_mat, to_tf32)
        elif forms.get("inverse", "").startswith(("fp16", "tf32 merges, similar")):
            t_inv = inverse_of(l_mat, forms["inverse"], key_norms[rows], stats)
        elif forms.get("inverse", "").startswith("gate-free"):
            # (I + L)^-1 = Gamma (.) (I + L0)^-1 with L0 = strict_lower(diag(beta) K K^T) (GDN_KERNELS.md
            # 1.2): L0's inverse in float32 (made apart from the gates, e.g. by a pre-pass), stored as
            # `inverse` says, then gated entry by entry.
            l0 = np.tril(bc[:, None] * (kc @ kc.T), -1)
            t0 = np.linalg.inv(np.eye(n) + l0).astype(np.float32).astype(np.float64)
            key = "gate-free Tinv0, largest entry off the diagonal"
            stats[key] = max(stats.get(key, 0.0), np.abs(t0 - np.eye(n)).max())
            if forms["inverse"] == "gate-free, stored bf16 hi+lo":
                t0 = sum(hi_lo(t0, to_bf16))
            elif forms["inverse"] == "gate-free, stored bf16":
                t0 = to_bf16(t0)
            t_inv = (np.tril(decay) * t0).astype(np.float32).astype(np.float64)
        else:
            t_inv = np.linalg.inv(np.eye(n) + l_mat)
        s_op = to_bf16(s)
        x = bc[:, None] * (vc - np.exp(big_g)[:, None] * (kc @ s_op))
        vnew = vnew_product(x, t_inv, forms["vnew"])
        out[rows] = scale * np.exp(big_g)[:, None] * (qc @ s_op) + output_product(p, vnew, forms["output"])
        w = np.exp(big_g[-1] - big_g)[:, None] * vnew
        s = np.exp(big_g[-1]) * s + kc.T @ state_operand(w, forms["state"])
    return out, s


def wy_factors(k, v, g, beta, inverse):
    """The chunk-parallel pass of a WY-factor context split: per chunk, Vnew = U - W S for any entry
    state S, with U = Tinv diag(beta) V and W = Tinv diag(beta exp(G)) K (G the gates' sum from the
    chunk's start). Made in float32 from the inverse as the fused kernel makes it."""
    factors = []
    for c0 in range(0, len(k), CHUNK):
        rows = slice(c0, min(c0 + CHUNK, len(k)))
        kc, vc, gc, bc = k[rows], v[rows], g[rows], beta[rows]
        n = len(kc)
        big_g = np.cumsum(gc)
        decay = np.exp(np.minimum(big_g[:, None] - big_g[None, :], 0))
        l_mat = np.tril(bc[:, None] * decay * (kc @ kc.T), -1)
        t_inv = blocked_inverse(np.eye(n) + l_mat, to_tf32) if inverse == "tf32 merges" else np.linalg.inv(np.eye(n) + l_mat)
        u = (t_inv @ (bc[:, None] * vc)).astype(np.float32).astype(np.float64)
        w = (t_inv @ ((bc * np.exp(big_g))[:, None] * kc)).astype(np.float32).astype(np.float64)
        factors.append((rows, big_g, u, w, t_inv.astype(np.float32).astype(np.float64)))
    return factors


def stored(x, form):
    """A factor as it comes back from the scratch."""
    if form == "f32":
        return x
    if form == "bf16 hi+lo":
        return sum(hi_lo(x, to_bf16))
    if form == "bf16":
        return to_bf16(x)
    raise ValueError(form)


def wy_chunk_step(s, kc, big_g, factor, forms, qc=None, scale=None):
    """One chunk from the stored factors: Vnew = U - W S (S a single bf16 operand, as in K S), or with
    Tinv stored instead, Vnew = Tinv X with X = diag(beta)(V - exp(G) K S) as the fused chunk makes it;
    then the output (when q is given) and the state update exactly as the fused chunk makes them."""
    u, w, t_inv, x_of = factor
    s_op = to_bf16(s)
    if "tinv" in forms:
        vnew = vnew_product(x_of(s_op), stored(t_inv, forms["tinv"]), forms["vnew"])
    else:
        vnew = stored(u, forms["u"]) - stored(w, forms["w"]) @ s_op
    out = None
    if qc is not None:
        n = len(qc)
        decay = np.exp(np.minimum(big_g[:, None] - big_g[None, :], 0))
        p = scale * decay * (qc @ kc.T) * np.tril(np.ones((n, n)))
        out = scale * np.exp(big_g)[:, None] * (qc @ s_op) + output_product(p, vnew, forms["output"])
    w_state = np.exp(big_g[-1] - big_g)[:, None] * vnew
    return np.exp(big_g[-1]) * s + kc.T @ state_operand(w_state, forms["state"]), out


def wy_split(q, k, v, g, beta, state, scale, segment_tokens, forms):
    """A context split from the chunk-parallel factors: every segment's N (from a zero state) and M
    (from the identity with U = 0: M <- exp(G_last) M - K~^T W M, the same update with M's columns as
    the state's), the carry S <- M S + N in float32, then every segment from its entry state."""
    def x_of(rows, big_g, values):
        return lambda s_op: beta[rows][:, None] * (values - np.exp(big_g)[:, None] * (k[rows] @ s_op))

    factors = wy_factors(k, v, g, beta, forms.get("inverse"))
    per_segment = segment_tokens // CHUNK
    segments = [factors[i:i + per_segment] for i in range(0, len(factors), per_segment)]
    entry = state.copy()
    out = np.empty_like(v)
    for seg in segments:
        n_state, m_state = np.zeros((K, V)), np.eye(K)
        for rows, big_g, u, w, t_inv in seg:
            n_state, _ = wy_chunk_step(n_state, k[rows], big_g, (u, w, t_inv, x_of(rows, big_g, v[rows])), forms)
            m_state, _ = wy_chunk_step(m_state, k[rows], big_g,
                                       (np.zeros_like(u), w, t_inv, x_of(rows, big_g, np.zeros_like(v[rows]))), forms)
        s = entry
        for rows, big_g, u, w, t_inv in seg:  # step 3: the output from the entry state
            s, out[rows] = wy_chunk_step(s, k[rows], big_g, (u, w, t_inv, x_of(rows, big_g, v[rows])), forms,
                                         q[rows], scale)
        entry = (m_state @ entry + n_state).astype(np.float32).astype(np.float64)  # the carry
        assert np.allclose(s, entry, atol=1e-2), "step 3's final state and the carry's disagree"
    return out, entry


SPLIT_CONFIGURATIONS = {
    "W, U in f32 (the split's own error)": dict(u="f32", w="f32"),
    "W, U stored bf16 hi+lo": dict(u="bf16 hi+lo", w="bf16 hi+lo"),
    "U hi+lo, W single bf16": dict(u="bf16 hi+lo", w="bf16"),
    "W, U stored single bf16": dict(u="bf16", w="bf16"),
    "Tinv stored bf16 hi+lo (X, Vnew as sm90)": dict(tinv="bf16 hi+lo", vnew="bf16 hi+lo, three products"),
    "Tinv stored single bf16": dict(tinv="bf16", vnew="bf16 hi+lo, three products"),
}


# The state warpgroups' products as sm90 makes them (the inverse chosen per configuration).
SM90_PRODUCTS = dict(vnew="bf16 hi+lo, three products", output="bf16 P, bf16 hi+lo Vnew, two products",
                     state="bf16 hi+lo")

CONFIGURATIONS = {
    "sm90 at 8dc2b86": dict(vnew="bf16 hi+lo, three products", output="bf16 P, bf16 hi+lo Vnew, two products",
                            state="bf16 hi+lo"),
    "sm90 with the merges in one tf32 product": dict(vnew="bf16 hi+lo, three products",
                                                     output="bf16 P, bf16 hi+lo Vnew, two products",
                                                     state="bf16 hi+lo", inverse="tf32 merges"),
    "output in fp16": dict(vnew="bf16 hi+lo, three products", output="fp16 P and Vnew, one product",
                           state="bf16 hi+lo"),
    "output in fp16, Vnew from fp16 Tinv": dict(vnew="fp16 Tinv, fp16 hi+lo X, two products",
                                                output="fp16 P and Vnew, one product", state="bf16 hi+lo"),
    "the same, merges in one tf32 product": dict(vnew="fp16 Tinv, fp16 hi+lo X, two products",
                                                 output="fp16 P and Vnew, one product", state="bf16 hi+lo",
                                                 inverse="tf32 merges"),
    "output in fp16, Vnew from bf16 Tinv": dict(vnew="bf16 Tinv, bf16 hi+lo X, two products",
                                                output="fp16 P and Vnew, one product", state="bf16 hi+lo"),
    "output in fp16, W single": dict(vnew="bf16 hi+lo, three products", output="fp16 P and Vnew, one product",
                                     state="single bf16"),
    "every operand single bf16": dict(vnew="single bf16", output="single bf16", state="single bf16"),
    # FlashInfer's count of products (32 m64n64k16 steps a state warpgroup and chunk, sm90's 52): one product
    # each, fp16 where the kernel makes both operands (Tinv and X; P and Vnew), W single bf16 (its other
    # operand is the bf16 K).
    "one product each, fp16 where both made": dict(vnew="single fp16", output="fp16 P and Vnew, one product",
                                                   state="single bf16", inverse="tf32 merges"),
    "the same with W as a hi + lo pair": dict(vnew="single fp16", output="fp16 P and Vnew, one product",
                                              state="bf16 hi+lo", inverse="tf32 merges"),
    # bf16 operands only (no range to guard), the splits dropped one product at a time: m64n64k16 steps a
    # state warpgroup and chunk in brackets (K S and Q S take 16 of them in every form).
    "bf16: output single (48)": dict(vnew="bf16 hi+lo, three products", output="single bf16", state="bf16 hi+lo",
                                     inverse="tf32 merges"),
    "bf16: X split, Tinv, output single (44)": dict(vnew="bf16 Tinv, bf16 hi+lo X, two products",
                                                    output="single bf16", state="bf16 hi+lo", inverse="tf32 merges"),
    "bf16: Vnew split three, W, output single (40)": dict(vnew="bf16 hi+lo, three products", output="single bf16",
                                                          state="single bf16", inverse="tf32 merges"),
    "bf16: X split, Tinv, W, output single (36)": dict(vnew="bf16 Tinv, bf16 hi+lo X, two products",
                                                       output="single bf16", state="single bf16",
                                                       inverse="tf32 merges"),
    "bf16: W split, the rest single (40)": dict(vnew="single bf16", output="single bf16", state="bf16 hi+lo",
                                                inverse="tf32 merges"),
    "bf16: every operand single (32)": dict(vnew="single bf16", output="single bf16", state="single bf16",
                                            inverse="tf32 merges"),
    # The inverse on fp16 operands instead of tf32 ones (the same 11 bits, half the mma.sync steps at k16),
    # and FlashInfer 0.7.4's inverse (the matrix and every level in fp16, 8 x 8 blocks); everything else as
    # sm90. The ", similar system" forms invert sm90's L' = N L N^-1 of the raw keys (--key-norm-spread).
    "sm90, the merges on fp16 operands": dict(SM90_PRODUCTS, inverse="fp16 merges"),
    "sm90, FlashInfer's inverse (fp16 levels)": dict(SM90_PRODUCTS, inverse="fp16 levels"),
    "sm90 as built, L' of the raw keys": dict(SM90_PRODUCTS, inverse="tf32 merges, similar system"),
    "fp16 merges, L' of the raw keys": dict(SM90_PRODUCTS, inverse="fp16 merges, similar system"),
    "fp16 levels, L' of the raw keys": dict(SM90_PRODUCTS, inverse="fp16 levels, similar system"),
    "gate-free Tinv0 in f32, gated after": dict(vnew="bf16 hi+lo, three products",
                                                output="bf16 P, bf16 hi+lo Vnew, two products", state="bf16 hi+lo",
                                                inverse="gate-free, f32"),
    "the same, Tinv0 stored bf16 hi+lo": dict(vnew="bf16 hi+lo, three products",
                                              output="bf16 P, bf16 hi+lo Vnew, two products", state="bf16 hi+lo",
                                              inverse="gate-free, stored bf16 hi+lo"),
    "the same, Tinv0 stored bf16": dict(vnew="bf16 hi+lo, three products",
                                        output="bf16 P, bf16 hi+lo Vnew, two products", state="bf16 hi+lo",
                                        inverse="gate-free, stored bf16"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--key-correlation", type=float, default=0.0,
                        help="weight of one direction shared by every key row (0: independent unit rows, as the "
                             "tests draw them; near 1: keys nearly parallel, the hardest case for an undamped inverse)")
    parser.add_argument("--gate-scale", type=float, default=1.0,
                        help="multiply the drawn log-decays (below 1: longer memory, e.g. 0.05 puts a chunk's decay "
                             "near the real model's; the tests' draw forgets most of the state every chunk)")
    parser.add_argument("--key-norm-spread", type=float, default=0.0,
                        help="raw key norms exp(S N(0, 1)) a token (0: all 1), for the forms that invert sm90's "
                             "similar system L' = N L N^-1; the recurrence sees the normalised keys either way")
    parser.add_argument("--only", default="",
                        help="only the configurations whose names contain this text")
    parser.add_argument("--split-tokens", type=int, default=0,
                        help="also model a context split from chunk-parallel WY factors (W, U through the scratch) "
                             "with segments of this many tokens (a multiple of 64)")
    args = parser.parse_args()
    if args.split_tokens % CHUNK:
        parser.error("--split-tokens must be a multiple of 64")
    rng = np.random.default_rng(args.seed)
    q, k, v, g, beta, state = draw(rng, args.tokens)
    g = (g * args.gate_scale).astype(np.float32).astype(np.float64)
    if args.key_correlation > 0:
        shared = rng.standard_normal(K)
        shared /= np.linalg.norm(shared)
        k = (1 - args.key_correlation) * k + args.key_correlation * shared
        k = to_bf16(k / np.linalg.norm(k, axis=1, keepdims=True))
    key_norms = np.exp(args.key_norm_spread * rng.standard_normal(args.tokens))
    scale = K ** -0.5
    want_out, want_state = recurrence(q, k, v, g, beta, state, scale)
    chunk_decay = np.exp([g[c:c + CHUNK].sum() for c in range(0, len(g), CHUNK)])
    print(f"seed {args.seed}, {args.tokens} tokens, key correlation {args.key_correlation}, gate scale "
          f"{args.gate_scale} (a chunk's decay: median {np.median(chunk_decay):.2g}), key norm spread "
          f"{args.key_norm_spread} (raw norms {key_norms.min():.2g} .. {key_norms.max():.2g}); errors against the float64 "
          f"recurrence")
    print(f"{'configuration':40s} {'out max':>9s} {'out (bf16) max':>15s} {'state max':>10s} {'state mean':>11s}")
    stats = {}
    for name, forms in CONFIGURATIONS.items():
        if args.only not in name:
            continue
        out, final = chunked(q, k, v, g, beta, state, scale, forms, stats, key_norms)
        print(f"{name:40s} {np.abs(out - want_out).max():9.2e} {np.abs(to_bf16(out) - want_out).max():15.2e} "
              f"{np.abs(final - want_state).max():10.2e} {np.abs(final - want_state).mean():11.2e}")
    for name, value in stats.items():
        print(f"{name}: " + (" / ".join(f"{x:.3g}" for x in value) if isinstance(value, tuple) else f"{value:.3g}"))
    if args.split_tokens:
        # Output and state products as sm90 makes them; only where the factors come from differs.
        base = dict(output="bf16 P, bf16 hi+lo Vnew, two products", state="bf16 hi+lo", inverse="tf32 merges")
        print(f"\nWY-factor context split, segments of {args.split_tokens} tokens (step 3's state is the carry's):")
        for name, forms in SPLIT_CONFIGURATIONS.items():
            out, final = wy_split(q, k, v, g, beta, state, scale, args.split_tokens, dict(base, **forms))
            print(f"{name:40s} {np.abs(out - want_out).max():9.2e} {np.abs(to_bf16(out) - want_out).max():15.2e} "
                  f"{np.abs(final - want_state).max():10.2e} {np.abs(final - want_state).mean():11.2e}")


if __name__ == "__main__":
    main()
