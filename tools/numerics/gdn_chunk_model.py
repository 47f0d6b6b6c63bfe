#!/usr/bin/env python3
"""A float64 model of one GDN prefill chunk as the sm90 kernel computes it, with the rounding of each
tensor-core operand chosen per configuration, against the float64 token recurrence.

What it answers: which operand roundings (bf16, a bf16 hi + lo pair, fp16) the error against the
oracle can afford, before a kernel is written or a GPU round spent. Inputs are drawn as the GPU
operator tests draw them (tests/gpu/test_gdn_prefill.cpp, make_batch): unit q and k rows in bf16,
v ~ N(0, 1) in bf16, decays mostly in [0.5, 1] with rare strong ones, beta = sigmoid(N(0, 1.5)), a
random initial state. Accumulation is float64 (the kernel's f32 accumulators add far less error than
its operand roundings); S is a single bf16 operand of K S and Q S in every configuration.

usage: gdn_chunk_model.py [--seed N] [--tokens T]
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


def blocked_inverse(a, rounding):
    """(I + L)^-1 as the kernels make it: 16 x 16 diagonal blocks exactly (float32), then merges of
    adjacent blocks, T_hl = -T_hh (L_hl T_ll), with both products' operands rounded by `rounding`."""
    n = a.shape[0]
    t = np.zeros((n, n))
    for b in range(0, n, 16):
        e = min(b + 16, n)
        t[b:e, b:e] = np.linalg.inv(a[b:e, b:e]).astype(np.float32)
    size = 16
    while size < n:
        for b in range(0, n, 2 * size):
            mid, e = min(b + size, n), min(b + 2 * size, n)
            if mid >= e:
                continue
            y = rounding(a[mid:e, b:mid]) @ rounding(t[b:mid, b:mid])
            t[mid:e, b:mid] = (-(rounding(t[mid:e, mid:e]) @ rounding(y))).astype(np.float32)
        size *= 2
    return t


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


def chunked(q, k, v, g, beta, state, scale, forms, stats=None):
    stats = {} if stats is None else stats
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
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    q, k, v, g, beta, state = draw(rng, args.tokens)
    if args.key_correlation > 0:
        shared = rng.standard_normal(K)
        shared /= np.linalg.norm(shared)
        k = (1 - args.key_correlation) * k + args.key_correlation * shared
        k = to_bf16(k / np.linalg.norm(k, axis=1, keepdims=True))
    scale = K ** -0.5
    want_out, want_state = recurrence(q, k, v, g, beta, state, scale)
    print(f"seed {args.seed}, {args.tokens} tokens, key correlation {args.key_correlation}; errors against the "
          "float64 recurrence")
    print(f"{'configuration':40s} {'out max':>9s} {'out (bf16) max':>15s} {'state max':>10s} {'state mean':>11s}")
    stats = {}
    for name, forms in CONFIGURATIONS.items():
        out, final = chunked(q, k, v, g, beta, state, scale, forms, stats)
        print(f"{name:40s} {np.abs(out - want_out).max():9.2e} {np.abs(to_bf16(out) - want_out).max():15.2e} "
              f"{np.abs(final - want_state).max():10.2e} {np.abs(final - want_state).mean():11.2e}")
    for name, value in stats.items():
        print(f"{name}: {value:.3g}")


if __name__ == "__main__":
    main()
