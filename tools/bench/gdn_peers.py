#!/usr/bin/env python3
"""Peer comparison of the Gated DeltaNet (GDN) chunked prefill on one GPU.

Kernels: every backend of deltainfer's C ABI library (libdeltainfer_gdn.so, include/deltainfer/gdn.h);
flash-linear-attention's chunk_gated_delta_rule (Triton, and through its FlashQLA backend when
flash-qla is installed); FlashInfer's chunk_gated_delta_rule; the Hugging Face torch fallback
torch_chunk_gated_delta_rule (qwen3_5). Peers come as wheels (tools/bench/fetch_wheels.sh tools/bench/gdn_peer_wheels.lock .whl/gdn-peers);
a peer that is missing or refuses a case is reported "unavailable: <reason>", one that throws is
reported "failed: <message>", and the run goes on.

Shapes: Qwen3.5 head geometries (Hk/Hv) 16/32, 16/48, 16/64, 4/16, 2/8 crossed with the sequence
mixes 1x2048, 1x8192, 1x32768, 4x8192, 8x2048, 32x1024, 4096+28672; K = V = 128.

Inputs (seeded, fresh per shape): raw bf16 q, k [T, Hk, 128] (every kernel L2-normalises them
itself, except FlashInfer 0.6.13: see FlashInferKernel), bf16 v [T, Hv, 128], log decay
g = -exp(A_log) * softplus(a + dt_bias) in f32 [T, Hv] with per-head A_log = log U(1, 16) and
dt_bias such that softplus(dt_bias) is log-uniform in [1e-3, 1e-1] (Mamba2's dt initialisation),
a ~ N(0, 1): per-token decay exp(g) between about 0.34 and 0.9994 (1st to 99th percentile);
beta = sigmoid(N(0, 1)) f32; a random f32 initial state per sequence; scale = 128^-0.5.

Timing: one CUDA graph per input set when the call can be captured, else eager calls (recorded
per kernel); CUDA events around every call; input sets rotated so that one pass over them exceeds
the 60 MB L2 (at least 2); warm-up; rounds in A..Z then Z..A order (default 4 rounds); median,
p10 and p90 over all samples.

FLOP convention: F_fused(C=64) = 2C(2K+2V) + 6KV = 163,840 FLOP per token per value head for every
kernel (the real work of the chunked algorithm, whatever it executes), reported as TFLOP/s and as
a fraction of 784 TFLOP/s, the bf16 GEMM rate measured on the H200.

Accuracy: against a float64 oracle on the same inputs (q, k L2-normalised in float64 from the bf16
values, x / sqrt(sum x^2 + 1e-6); the exact recurrence in chunked UT form). An element is past
tolerance when |err| > ATOL * rms(ref) + RTOL * |ref| (rms over the whole tensor, which makes the
rule independent of the data's scale) or it is not finite (constants below). Outputs are
poisoned with NaN before the accuracy call (best effort for peers that allocate their outputs).

usage: PYTHONPATH=<wheels dir> python3 tools/bench/gdn_peers.py --lib build-gpu/libdeltainfer_gdn.so
           --out DIR [--quick] [--shapes GLOBS] [--kernels GLOBS] [--time-budget-s S]
       python3 tools/bench/gdn_peers.py --self-test         (oracle and ctypes checks; CPU is fine)
       python3 tools/bench/gdn_peers.py --dry-run --out DIR (oracle and HF fallback at a tiny shape)
       PYTHONPATH=<wheels dir> MAX_JOBS=2 python3 tools/bench/gdn_peers.py --prebuild-flashinfer
           --flashinfer-workspace .whl/flashinfer-cache  (FlashInfer's GDN module ahead of time, no GPU)
"""
import argparse
import ctypes
import datetime
import fnmatch
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path

import torch

K_DIM = V_DIM = 128
CHUNK = 64
FLOP_PER_TH = 2 * CHUNK * (2 * K_DIM + 2 * V_DIM) + 6 * K_DIM * V_DIM  # 163,840
GEMM_PEAK_TFLOPS = 784.0

# Tolerance: |err| > ATOL * rms(ref) + RTOL * |ref|. The output is bf16 (relative rounding 2^-9)
# computed from bf16-rounded normalised q/k and bf16 GEMM operands; the state is f32 but inherits
# those errors. f32 math on bf16 q/k/out stays under 3% of rms (self-test); a wrong gate domain,
# head map or state orientation is off by O(rms) and fails.
OUT_ATOL, OUT_RTOL = 0.05, 0.02
STATE_ATOL, STATE_RTOL = 0.05, 0.02

HEADS = [(16, 32), (16, 48), (16, 64), (4, 16), (2, 8)]
MIXES = {
    "1x2048": [2048],
    "1x8192": [8192],
    "1x32768": [32768],
    "4x8192": [8192] * 4,
    "8x2048": [2048] * 8,
    "32x1024": [1024] * 32,
    "4096+28672": [4096, 28672],
}
QUICK_HEADS = [(16, 32), (2, 8)]
QUICK_MIXES = ["1x2048", "8x2048", "4096+28672"]
DRY_RUN_SHAPES = [((2, 4), "100+64", [100, 64]), ((1, 2), "1x70", [70])]

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK_PATH = os.path.join(HERE, "gdn_peer_wheels.lock")
HEADER_PATH = os.path.join(HERE, "..", "..", "include", "deltainfer", "gdn.h")


def log(msg):
    print(msg, flush=True)


class Unavailable(Exception):
    """The kernel cannot serve this case (missing package, refused geometry): not a failure."""


# ----------------------------------------------------------------------------------------------
# The float64 oracle


def l2norm64(x):
    x = x.to(torch.float64)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def oracle_chunked(q, k, v, g, beta, h0, cu, hk, hv, scale, chunk=CHUNK, dtype=torch.float64):
    """Exact GDN prefill in chunked (UT transform) form, batched over value heads, one sequence at a
    time. q, k [T, Hk, K]; v [T, Hv, V]; g, beta [T, Hv]; h0 [N, Hv, K, V]; cu host ints.
    Returns out [T, Hv, V] and final state [N, Hv, K, V] in `dtype`.

    Per chunk, with G the in-chunk cumulative log decay, Gam_ij = exp(G_i - G_j) (i >= j):
      (I + strict(diag(beta) Gam*KK^T)) [W | U] = [diag(beta) exp(G) K | diag(beta) V]
      Vnew = U - W S;  O = scale (exp(G) Q S + (Gam*QK^T, incl. diagonal) Vnew)
      S <- exp(G_last) S + K^T diag(exp(G_last - G)) Vnew
    """
    dev = q.device
    T, n = q.shape[0], len(cu) - 1
    r = hv // hk
    out = torch.zeros(T, hv, V_DIM, dtype=dtype, device=dev)
    final = torch.empty(n, hv, K_DIM, V_DIM, dtype=dtype, device=dev)
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=dev).tril()
    strict = torch.ones(chunk, chunk, dtype=torch.bool, device=dev).tril(-1)
    qn, kn = l2norm64(q).to(dtype), l2norm64(k).to(dtype)
    for i in range(n):
        s, e = cu[i], cu[i + 1]
        S = h0[i].to(dtype)
        length = e - s
        if length == 0:
            final[i] = S
            continue
        pad = (-length) % chunk
        nc = (length + pad) // chunk

        def heads_first(x, expand):
            x = x[s:e].to(dtype)
            if expand:
                x = x.repeat_interleave(r, dim=1)
            x = x.transpose(0, 1)  # [Hv, L, D] or [Hv, L]
            x = torch.nn.functional.pad(x, (0, 0, 0, pad) if x.dim() == 3 else (0, pad))
            return x.reshape(hv, nc, chunk, *x.shape[2:])

        qc = heads_first(qn, True)
        kc = heads_first(kn, True)
        vc = heads_first(v, False)
        gc = heads_first(g, False)  # padded tokens: g = 0, beta = 0, k = 0: no effect
        bc = heads_first(beta, False)
        G = gc.cumsum(-1)
        diff = G[..., :, None] - G[..., None, :]
        gam = torch.exp(diff.masked_fill(~incl, float("-inf")))
        kkt = kc @ kc.transpose(-1, -2)
        a = torch.eye(chunk, dtype=dtype, device=dev) + (bc[..., :, None] * gam * kkt).masked_fill(~strict, 0)
        rhs = torch.cat([(bc * torch.exp(G))[..., None] * kc, bc[..., None] * vc], -1)
        sol = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
        del rhs, a, kkt
        w, u = sol[..., :K_DIM], sol[..., K_DIM:]
        qk = (qc @ kc.transpose(-1, -2)) * gam
        qd = qc * torch.exp(G)[..., None]
        kd = kc * torch.exp(G[..., -1:] - G)[..., None]
        glast = torch.exp(G[..., -1])[..., None, None]  # [Hv, nc, 1, 1]
        o = torch.empty(hv, nc, chunk, V_DIM, dtype=dtype, device=dev)
        for c in range(nc):
            vnew = u[:, c] - w[:, c] @ S
            o[:, c] = scale * (qd[:, c] @ S + qk[:, c] @ vnew)
            S = glast[:, c] * S + kd[:, c].transpose(-1, -2) @ vnew
        out[s:e] = o.reshape(hv, nc * chunk, V_DIM)[:, :length].transpose(0, 1)
        final[i] = S
    return out, final


def oracle_tokens(q, k, v, g, beta, h0, cu, hk, hv, scale):
    """The recurrence token by token in float64 (self-test only)."""
    r = hv // hk
    qn = l2norm64(q).repeat_interleave(r, dim=1)
    kn = l2norm64(k).repeat_interleave(r, dim=1)
    v, g, beta = v.double(), g.double(), beta.double()
    out = torch.zeros(q.shape[0], hv, V_DIM, dtype=torch.float64)
    final = torch.empty(len(cu) - 1, hv, K_DIM, V_DIM, dtype=torch.float64)
    for i in range(len(cu) - 1):
        S = h0[i].double().clone()
        for t in range(cu[i], cu[i + 1]):
            S = S * torch.exp(g[t])[:, None, None]
            kt = kn[t]
            vp = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, kt))
            S = S + kt[:, :, None] * vp[:, None, :]
            out[t] = scale * torch.einsum("hkv,hk->hv", S, qn[t])
        final[i] = S
    return out, final


def err_stats(got, ref, atol, rtol):
    """max/mean/p99 of |got - ref| over finite elements; bad = past atol * rms(ref) + rtol * |ref|,
    or not finite."""
    g = got.to(torch.float64)
    finite = torch.isfinite(g)
    n = g.numel()
    n_nonfinite = int(n - int(finite.sum()))
    rms = float(ref.pow(2).mean().sqrt())
    d = (g - ref).abs()
    bad = int(((d > atol * rms + rtol * ref.abs()) & finite).sum()) + n_nonfinite
    df = d[finite].to(torch.float32)
    stats = {"n": n, "n_nonfinite": n_nonfinite, "n_bad": bad, "ref_rms": rms}
    if df.numel() == 0:
        stats.update(max_abs=None, mean_abs=None, p99_abs=None)
        return stats
    flat = df.flatten()
    if flat.numel() > (1 << 24):  # a strided sample keeps the selection quick on 10^8 elements
        flat = flat[:: math.ceil(flat.numel() / (1 << 24))]
        stats["p99_sampled"] = flat.numel()
    p99 = float(torch.kthvalue(flat, max(1, math.ceil(0.99 * flat.numel()))).values)
    stats.update(max_abs=float(df.max()), mean_abs=float(df.mean()), p99_abs=p99,
                 max_over_rms=float(df.max()) / rms if rms else None)
    return stats


# ----------------------------------------------------------------------------------------------
# Inputs


class Shape:
    def __init__(self, hk, hv, mix, lens):
        self.hk, self.hv, self.mix, self.lens = hk, hv, mix, list(lens)
        self.tokens = sum(lens)
        self.n = len(lens)
        self.cu = [0]
        for length in lens:
            self.cu.append(self.cu[-1] + length)
        self.label = f"{hk}/{hv}@{mix}"

    def set_bytes(self):
        t, n = self.tokens, self.n
        return t * (2 * self.hk * K_DIM * 2 + self.hv * V_DIM * 2 + self.hv * 8) + n * self.hv * K_DIM * V_DIM * 4


# The decay regimes --gates picks, as the range of softplus(dt_bias) (log-uniform per head):
# "mamba2-init" spreads the heads from fast to slow decay (per-token decay 0.34 to 0.9994, 1st to 99th
# percentile); "slow" gives every head a per-token decay above 0.999, so that no segment of a few
# thousand tokens forgets its entry state to e^-10 (FlashQLA's context split runs its exact form).
GATE_REGIMES = {"mamba2-init": (1e-3, 1e-1), "slow": (1e-6, 1e-5)}


def make_gates(shape, gen, device, regime="mamba2-init"):
    """Per-head decay parameters shared by every input set of a shape."""
    lo, hi = GATE_REGIMES[regime]
    a_log = torch.log(torch.empty(shape.hv, device=device).uniform_(1.0, 16.0, generator=gen))
    dt = torch.exp(torch.empty(shape.hv, device=device).uniform_(math.log(lo), math.log(hi), generator=gen))
    dt_bias = torch.log(torch.expm1(dt))  # softplus(dt_bias) = dt
    return a_log, dt_bias


def make_set(shape, gen, device, gates, state_std):
    t, hk, hv = shape.tokens, shape.hk, shape.hv
    a_log, dt_bias = gates

    def randn(*size):
        return torch.randn(*size, generator=gen, device=device, dtype=torch.float32)

    a = randn(t, hv)
    g = -torch.exp(a_log) * torch.nn.functional.softplus(a + dt_bias)
    return {
        "q": randn(t, hk, K_DIM).to(torch.bfloat16),
        "k": randn(t, hk, K_DIM).to(torch.bfloat16),
        "v": randn(t, hv, V_DIM).to(torch.bfloat16),
        "g": g.contiguous(),
        "beta": torch.sigmoid(randn(t, hv)).contiguous(),
        "h0": (state_std * randn(shape.n, hv, K_DIM, V_DIM)).contiguous(),
        "cu32": torch.tensor(shape.cu, dtype=torch.int32, device=device),
    }


def gate_stats(g, cu):
    """Spread of the decay, to check it is realistic: per-token g and per-chunk decay exp(sum g)."""
    gf = g.float().flatten()
    qs = torch.quantile(gf[:: max(1, gf.numel() // (1 << 22))], torch.tensor([0.01, 0.5, 0.99], device=gf.device))
    chunk_sums = []
    for i in range(len(cu) - 1):
        s, e = cu[i], cu[i + 1]
        whole = (e - s) // CHUNK * CHUNK
        if whole:
            chunk_sums.append(g[s:s + whole].reshape(-1, CHUNK, g.shape[1]).sum(1).flatten())
    out = {"g_p01": float(qs[0]), "g_p50": float(qs[1]), "g_p99": float(qs[2]),
           "alpha_p50": math.exp(float(qs[1]))}
    if chunk_sums:
        cs = torch.cat(chunk_sums)
        out["chunk_decay_p50"] = math.exp(float(cs.median()))
        out["frac_chunks_decay_above_1e-3"] = float((cs > math.log(1e-3)).float().mean())
    return out


def l2norm_bf16(x):
    """What FlashInfer's own normalisation (0.7) does: f32 norm, rounded back to bf16."""
    xf = x.float()
    return (xf / torch.sqrt((xf * xf).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)


# ----------------------------------------------------------------------------------------------
# deltainfer through its C ABI (include/deltainfer/gdn.h, mirrored field by field)


class DiGeometry(ctypes.Structure):
    _fields_ = [("num_k_heads", ctypes.c_int32), ("num_v_heads", ctypes.c_int32),
                ("k_dim", ctypes.c_int32), ("v_dim", ctypes.c_int32)]


class DiDevice(ctypes.Structure):
    _fields_ = [("sm_major", ctypes.c_int32), ("sm_minor", ctypes.c_int32), ("num_sms", ctypes.c_int32),
                ("shared_memory_per_block_optin", ctypes.c_size_t)]


class DiPrefillShape(ctypes.Structure):
    _fields_ = [("geometry", DiGeometry), ("num_seqs", ctypes.c_int32), ("total_tokens", ctypes.c_int64),
                ("max_seq_tokens", ctypes.c_int64)]


class DiPrefillArgs(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("geometry", DiGeometry),
        ("state_layout", ctypes.c_int),  # di_gdn_state_layout (a C enum: int)
        ("num_seqs", ctypes.c_int32),
        ("total_tokens", ctypes.c_int64),
        ("max_seq_tokens", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("flags", ctypes.c_uint32),
        ("cu_seqlens", ctypes.c_void_p),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("g", ctypes.c_void_p),
        ("beta", ctypes.c_void_p),
        ("initial_state", ctypes.c_void_p),
        ("final_state", ctypes.c_void_p),
        ("state_indices", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
    ]


DI_SUPPORTS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DiGeometry), ctypes.POINTER(DiDevice), ctypes.c_int,
                               ctypes.c_char_p, ctypes.c_size_t)
DI_SCRATCH = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.POINTER(DiPrefillShape))
DI_RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(DiPrefillArgs), ctypes.c_void_p, ctypes.c_size_t,
                          ctypes.c_void_p)


class DiBackend(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("supports", DI_SUPPORTS), ("scratch_bytes", DI_SCRATCH), ("run", DI_RUN)]


DI_ABI_VERSION = 2
DI_OK, DI_UNSUPPORTED = 0, 2
DI_STATE_KV, DI_STATE_VK = 0, 1
DI_QK_L2NORM = 1
DI_STATUS = {0: "OK", 1: "INVALID_ARGUMENT", 2: "UNSUPPORTED", 3: "LAUNCH_FAILED"}


def load_deltainfer(path):
    """Returns (library, [(name, backend struct)], build info dict)."""
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.di_gdn_prefill_backends.restype = ctypes.POINTER(ctypes.POINTER(DiBackend))
    lib.di_gdn_prefill_backends.argtypes = [ctypes.POINTER(ctypes.c_int32)]
    lib.di_gdn_build_info.restype = ctypes.c_char_p
    lib.di_gdn_build_info.argtypes = []
    count = ctypes.c_int32(0)
    arr = lib.di_gdn_prefill_backends(ctypes.byref(count))
    backends = [(arr[i].contents.name.decode(), arr[i].contents) for i in range(count.value)] if arr else []
    try:
        info = json.loads(lib.di_gdn_build_info().decode())
    except (ValueError, AttributeError):
        info = {"raw": str(lib.di_gdn_build_info())}
    return lib, backends, info


def di_device_struct():
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    smem = getattr(props, "shared_memory_per_block_optin", None)
    if not smem:  # older torch: ask the driver (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        cuda = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int(0)
        cuda.cuInit(0)
        cuda.cuDeviceGetAttribute(ctypes.byref(value), 97, torch.cuda.current_device())
        smem = value.value
    return DiDevice(props.major, props.minor, props.multi_processor_count, smem)


def di_supports(backend, hk, hv, device, layout):
    geometry = DiGeometry(hk, hv, K_DIM, V_DIM)
    reason = ctypes.create_string_buffer(512)
    status = backend.supports(ctypes.byref(geometry), ctypes.byref(device), layout, reason, len(reason))
    return status, reason.value.decode(errors="replace")


# ----------------------------------------------------------------------------------------------
# Kernels. Each kernel's prepare() gets the shape and the input sets and returns an object with
# call(i) (enqueue one prefill on input set i on the current stream), outputs(i) (out [T, Hv, V],
# final state [N, Hv, K, V] in K-major "KV" orientation), release(i), and the facts to report.


class Prepared:
    scratch_bytes = None  # declared scratch, when the kernel states it
    notes = ()

    def release(self, i):
        pass


class Kernel:
    peer = True
    name = "?"
    version = None
    static_reason = None  # set at start when the package is missing
    notes = ()

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        raise NotImplementedError


class DeltaInferKernel(Kernel):
    peer = False

    def __init__(self, name, backend, lib):
        self.name = f"deltainfer:{name}"
        self.backend, self.lib = backend, lib
        self.notes = ("q/k raw with DI_GDN_QK_L2NORM; the longest sequence's length as max_seq_tokens (as the "
                      "engine passes it); timed in the [H,K,V] layout, accuracy in both",)

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        device = di_device_struct()
        status, reason = di_supports(self.backend, shape.hk, shape.hv, device, layout)
        if status != DI_OK:
            raise Unavailable(f"supports() refused ({DI_STATUS.get(status, status)}): {reason}")
        pshape = DiPrefillShape(DiGeometry(shape.hk, shape.hv, K_DIM, V_DIM), shape.n, shape.tokens, max(shape.lens))
        scratch = int(self.backend.scratch_bytes(ctypes.byref(pshape)))
        return _DiPrepared(self, shape, sets, scale, layout, scratch)


class _DiPrepared(Prepared):
    def __init__(self, kernel, shape, sets, scale, layout, scratch):
        self.run = kernel.backend.run
        self.layout = layout
        self.scratch_bytes = scratch
        self.scratch = torch.empty(max(scratch, 1), dtype=torch.uint8, device="cuda") if scratch else None
        self.bufs, self.args = [], []
        for s in sets:
            h0 = s["h0"] if layout == DI_STATE_KV else s["h0"].transpose(-1, -2).contiguous()
            out = torch.empty(shape.tokens, shape.hv, V_DIM, dtype=torch.bfloat16, device="cuda")
            fin = torch.empty_like(h0)
            self.bufs.append((h0, out, fin))
            self.args.append(DiPrefillArgs(
                DI_ABI_VERSION, DiGeometry(shape.hk, shape.hv, K_DIM, V_DIM), layout, shape.n, shape.tokens,
                max(shape.lens), scale, DI_QK_L2NORM, s["cu32"].data_ptr(), s["q"].data_ptr(), s["k"].data_ptr(), s["v"].data_ptr(),
                s["g"].data_ptr(), s["beta"].data_ptr(), h0.data_ptr(), fin.data_ptr(), None, out.data_ptr()))

    def call(self, i):
        stream = torch.cuda.current_stream().cuda_stream
        ptr = self.scratch.data_ptr() if self.scratch is not None else None
        status = self.run(ctypes.byref(self.args[i]), ptr, self.scratch_bytes, stream)
        if status != DI_OK:
            raise RuntimeError(f"run() returned {DI_STATUS.get(status, status)}")

    def poison(self, i):
        self.bufs[i][1].fill_(float("nan"))
        self.bufs[i][2].fill_(float("nan"))

    def outputs(self, i):
        _, out, fin = self.bufs[i]
        return out, (fin if self.layout == DI_STATE_KV else fin.transpose(-1, -2))


class FlaKernel(Kernel):
    """flash-linear-attention chunk_gated_delta_rule: [1, T, H, D] varlen with int64 cu_seqlens,
    log-space g, state [N, Hv, K, V] f32. FLA_FLASH_QLA (read at every call) picks the backend."""

    def __init__(self, flashqla):
        self.flashqla = flashqla
        self.name = "fla-flashqla" if flashqla else "fla-triton"
        self.notes = ("allocates its outputs; use_qk_l2norm_in_kernel=True (separate l2norm launches)",)
        try:
            import fla  # noqa: F401
            from fla.ops.gated_delta_rule import chunk_gated_delta_rule
            from fla.ops.utils.index import prepare_chunk_indices
            self.fn, self.prepare_chunk_indices = chunk_gated_delta_rule, prepare_chunk_indices
            self.version = _dist_version("fla-core") or getattr(fla, "__version__", None)
        except Exception as exc:  # noqa: BLE001
            self.static_reason = f"flash-linear-attention not importable: {_short(exc)}"
            return
        if flashqla:
            try:
                from fla.ops.gated_delta_rule.backends.flash_qla import FlashQLABackend
                self.backend_cls = FlashQLABackend
            except Exception as exc:  # noqa: BLE001
                self.static_reason = f"this FLA has no FlashQLA backend: {_short(exc)}"
                return
            if importlib.util.find_spec("flash_qla") is None:
                self.static_reason = lock_reason("flashqla") or "flash-qla is not installed"
            else:
                self.version = f"{self.version} + flash-qla {_dist_version('flash-qla')}"

    def _env(self):
        os.environ["FLA_FLASH_QLA"] = "1" if self.flashqla else "0"

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        cu64 = sets[0]["cu32"].to(torch.int64)
        cu_cpu = torch.tensor(shape.cu, dtype=torch.int64)
        # Host-computed once: FLA would otherwise copy it to the device inside every call, which a
        # CUDA graph capture cannot hold.
        chunk_indices = self.prepare_chunk_indices(cu64, CHUNK, cu_seqlens_cpu=cu_cpu)
        p = _FlaPrepared(self, sets, scale, cu64, cu_cpu, chunk_indices)
        if self.flashqla:
            # FLA reads FLA_FLASH_QLA at every check: a run of fla-triton before this one left it "0".
            self._env()
            backend = self.backend_cls()
            if not (backend.is_available() and backend.is_enabled()):
                raise Unavailable("FLA's FlashQLA backend is not available or not enabled")
            ok, reason = backend.verify("chunk_gated_delta_rule", *p.args(0)[0], **p.args(0)[1])
            if not ok:
                raise Unavailable(f"FLA's FlashQLA backend refuses: {reason}")
        return p


class _FlaPrepared(Prepared):
    def __init__(self, kernel, sets, scale, cu64, cu_cpu, chunk_indices):
        self.kernel, self.sets, self.scale = kernel, sets, scale
        self.cu64, self.cu_cpu, self.chunk_indices = cu64, cu_cpu, chunk_indices
        self.results = [None] * len(sets)

    def args(self, i):
        s = self.sets[i]
        pos = (s["q"][None], s["k"][None], s["v"][None], s["g"][None], s["beta"][None])
        kw = dict(scale=self.scale, initial_state=s["h0"], output_final_state=True, use_qk_l2norm_in_kernel=True,
                  cu_seqlens=self.cu64, cu_seqlens_cpu=self.cu_cpu, chunk_indices=self.chunk_indices)
        return pos, kw

    def call(self, i):
        self.kernel._env()
        pos, kw = self.args(i)
        self.results[i] = self.kernel.fn(*pos, **kw)

    def outputs(self, i):
        o, st = self.results[i]
        return o[0], st

    def release(self, i):
        self.results[i] = None


# FlashInfer's JIT cache and the GDN prefill module in it (flashinfer/jit/env.py, jit/gdn.py, 0.6.13):
# FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops/gdn_prefill_sm90/gdn_prefill_sm90.so,
# <archs> being "90a" for FLASHINFER_CUDA_ARCH_LIST=9.0a or a single detected H100/H200.
FI_GDN_MODULE = "gdn_prefill_sm90"
FI_ARCH_LIST = "9.0a"


def flashinfer_env(workspace):
    """--flashinfer-workspace: FlashInfer reads these when it is first imported."""
    os.environ["FLASHINFER_WORKSPACE_BASE"] = os.path.abspath(workspace)
    # FlashInfer names the cache folder after its target archs, detected from the GPUs when unset:
    # fixed, the folder is the same on a machine with no GPU (--prebuild-flashinfer) and on the H200.
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", FI_ARCH_LIST)


def flashinfer_use_prebuilt():
    """Makes FlashInfer load the modules already built in its workspace as they are, without ninja.

    FlashInfer 0.6.13 (flashinfer/jit/core.py, JitSpec.build_and_load) loads <FLASHINFER_AOT_DIR>/
    <name>/<name>.so directly when that file exists; otherwise it rewrites build.ninja with this
    machine's absolute paths (generated sources in the workspace, headers in site-packages) and runs
    ninja, so a cache built in another folder or on another machine is recompiled whole, whatever
    its files' mtimes. Its JIT folder (cached_ops) has the same <name>/<name>.so layout, and
    FLASHINFER_AOT_DIR is a module attribute it reads at each load (jit/env.py asks for overriding
    it that way), so pointing it at cached_ops makes every module built there load as prebuilt;
    a module that is not there is JIT-built as before. Returns a note for the report."""
    import hashlib
    import flashinfer.jit.env as fi_env
    so = fi_env.FLASHINFER_JIT_DIR / FI_GDN_MODULE / f"{FI_GDN_MODULE}.so"
    if not so.exists():
        return f"no prebuilt {so}: the GDN module is JIT-compiled on first use"
    fi_env.FLASHINFER_AOT_DIR = fi_env.FLASHINFER_JIT_DIR
    with open(so, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    # Named from the workspace on: the report says which build, not where this machine keeps it.
    base = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", so.anchor))
    shown = f"<workspace>/{so.relative_to(base)}" if so.is_relative_to(base) else so.name
    return f"GDN module loaded prebuilt from {shown} (sha256 {sha[:16]}, {so.stat().st_size} B)"


def prebuild_flashinfer(workspace):
    """--prebuild-flashinfer: compiles FlashInfer's SM90 GDN prefill module into the workspace on a
    machine without a GPU (it needs nvcc, torch and the peer wheels; MAX_JOBS caps ninja's jobs),
    then deletes what loading it does not need (objects, dependency files, ninja's log, the
    generated sources, which FlashInfer writes again at each load), leaving the .so and build.ninja
    (the exact compile commands)."""
    flashinfer_env(workspace)
    # FlashInfer compiles with -O0 -g when FLASHINFER_JIT_DEBUG, or else FLASHINFER_JIT_VERBOSE, is 1.
    os.environ["FLASHINFER_JIT_DEBUG"] = "0"
    import flashinfer.jit.env as fi_env
    from flashinfer.jit.gdn import gen_gdn_prefill_sm90_module
    spec = gen_gdn_prefill_sm90_module()
    if spec.name != FI_GDN_MODULE:
        sys.exit(f"gdn_peers: FlashInfer names its GDN module {spec.name!r}, not {FI_GDN_MODULE!r}")
    log(f"gdn_peers: building {spec.jit_library_path} ({len(spec.sources)} sources, MAX_JOBS="
        f"{os.environ.get('MAX_JOBS', 'ninja default')})")
    t0 = time.time()
    spec.build(verbose=True)  # ninja's progress on stdout
    for name in os.listdir(spec.build_dir):
        if name.endswith((".o", ".o.d")) or name in (".ninja_log", ".ninja_deps"):
            os.remove(os.path.join(spec.build_dir, name))
    shutil.rmtree(fi_env.FLASHINFER_GEN_SRC_DIR / FI_GDN_MODULE, ignore_errors=True)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(workspace) for f in fs)
    log(f"gdn_peers: built in {time.time() - t0:.0f} s; {spec.jit_library_path.stat().st_size} B .so, "
        f"{total} B in {workspace}")
    return 0


class FlashInferKernel(Kernel):
    """FlashInfer chunk_gated_delta_rule, whichever release is importable (0.6.13's CUTLASS kernel or
    a CuTe-DSL one from 0.6.14): packed [T, H, D] + cu_seqlens (int64 on SM90), linear alpha = exp(g)
    f32, beta f32, state [N, Hv, V, K] f32, caller-provided output and state. 0.6.13's SM90 path
    ignores use_qk_l2norm_in_kernel, so q/k are normalised (f32, rounded to bf16) once per input set
    outside the timed call for every release: its times exclude that pass. With a workspace
    (--flashinfer-workspace), a 0.6.13 GDN module prebuilt there is loaded without compiling."""

    def __init__(self, workspace=None):
        self.name = "flashinfer"
        self.notes = ("q/k pre-normalised outside the timed call (0.6.13 ignores use_qk_l2norm_in_kernel on "
                      "SM90; every release gets the same inputs): its time excludes normalisation; g passed as "
                      "linear alpha = exp(g)",)
        try:
            import flashinfer
            from flashinfer.gdn_prefill import chunk_gated_delta_rule
            self.fn = chunk_gated_delta_rule
            self.version = getattr(flashinfer, "__version__", None)
            if workspace:
                self.notes += (flashinfer_use_prebuilt(),)
        except Exception as exc:  # noqa: BLE001
            self.static_reason = f"flashinfer not importable: {_short(exc)}"
        else:
            if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
                self.static_reason = "this FlashInfer's GDN prefill is built here for SM90 only"

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        return _FiPrepared(self, shape, sets, scale)


class _FiPrepared(Prepared):
    def __init__(self, kernel, shape, sets, scale):
        self.fn, self.scale = kernel.fn, scale
        self.cu64 = sets[0]["cu32"].to(torch.int64)
        # Releases from 0.6.14 choose their context split on the host: given the offsets there, the
        # call needs no device-to-host copy and can be captured in a graph.
        self.host_offsets = {}
        if "cu_seqlens_cpu" in inspect.signature(self.fn).parameters:
            self.host_offsets = dict(cu_seqlens_cpu=list(shape.cu), max_seqlen=max(shape.lens))
        self.bufs = []
        for s in sets:
            self.bufs.append(dict(
                q=l2norm_bf16(s["q"]), k=l2norm_bf16(s["k"]), v=s["v"], alpha=torch.exp(s["g"]), beta=s["beta"],
                h0=s["h0"].transpose(-1, -2).contiguous(),
                out=torch.empty(shape.tokens, shape.hv, V_DIM, dtype=torch.bfloat16, device="cuda"),
                fin=torch.empty(shape.n, shape.hv, V_DIM, K_DIM, dtype=torch.float32, device="cuda")))

    def call(self, i):
        b = self.bufs[i]
        self.fn(b["q"], b["k"], b["v"], g=b["alpha"], beta=b["beta"], scale=self.scale, initial_state=b["h0"],
                output_final_state=True, cu_seqlens=self.cu64, use_qk_l2norm_in_kernel=False, output=b["out"],
                output_state=b["fin"], **self.host_offsets)

    def poison(self, i):
        self.bufs[i]["out"].fill_(float("nan"))
        self.bufs[i]["fin"].fill_(float("nan"))

    def outputs(self, i):
        return self.bufs[i]["out"], self.bufs[i]["fin"].transpose(-1, -2)


class HfTorchKernel(Kernel):
    """transformers' torch_chunk_gated_delta_rule (qwen3_5): [B, T, H, D], log-space g, state
    [B, Hv, K, V], no varlen and no GVA. As in the HF model, q/k are repeat_interleave'd to Hv and
    each sequence is one call; all of that is inside the timed call."""

    def __init__(self):
        self.name = "hf-torch"
        self.notes = ("one call per sequence, q/k expanded to Hv inside the call, f32 math",)
        try:
            import transformers
            mod = importlib.import_module("transformers.models.qwen3_5.modeling_qwen3_5")
            fn = mod.torch_chunk_gated_delta_rule
        except Exception as exc:  # noqa: BLE001
            self.static_reason = f"transformers' qwen3_5 torch fallback not importable: {_short(exc)}"
            return
        # The module attribute dispatches to FLA when FLA is importable: take the torch function.
        fn = inspect.unwrap(fn)
        if not fn.__code__.co_filename.endswith("modeling_qwen3_5.py"):
            self.static_reason = f"unwrapped function comes from {fn.__code__.co_filename}, not the torch fallback"
            return
        self.fn = fn
        self.version = transformers.__version__

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        if abs(scale - K_DIM ** -0.5) > 1e-9:
            raise Unavailable("the torch fallback always scales by K^-0.5")
        return _HfPrepared(self, shape, sets)


class _HfPrepared(Prepared):
    def __init__(self, kernel, shape, sets):
        self.fn, self.shape, self.sets = kernel.fn, shape, sets
        dev = sets[0]["q"].device
        self.bufs = [(torch.empty(shape.tokens, shape.hv, V_DIM, dtype=torch.bfloat16, device=dev),
                      torch.empty(shape.n, shape.hv, K_DIM, V_DIM, dtype=torch.float32, device=dev)) for _ in sets]

    def call(self, i):
        s, (out, fin), sh = self.sets[i], self.bufs[i], self.shape
        r = sh.hv // sh.hk
        for n in range(sh.n):
            a, b = sh.cu[n], sh.cu[n + 1]
            q = s["q"][a:b][None].repeat_interleave(r, dim=2)
            k = s["k"][a:b][None].repeat_interleave(r, dim=2)
            o, st = self.fn(q, k, s["v"][a:b][None], s["g"][a:b][None], s["beta"][a:b][None], chunk_size=CHUNK,
                            initial_state=s["h0"][n:n + 1], output_final_state=True, use_qk_l2norm_in_kernel=True)
            out[a:b].copy_(o[0])
            fin[n].copy_(st[0])

    def poison(self, i):
        self.bufs[i][0].fill_(float("nan"))
        self.bufs[i][1].fill_(float("nan"))

    def outputs(self, i):
        return self.bufs[i]


class FakeKernel(Kernel):
    """--dry-run only: exercises the unavailable, failing and accuracy paths without a GPU."""

    def __init__(self, mode):
        self.name, self.mode = f"fake-{mode}", mode
        if mode == "unavailable":
            self.static_reason = "fake kernel that is never available"

    def prepare(self, shape, sets, scale, layout=DI_STATE_KV):
        return _FakePrepared(self, shape, sets, scale)


class _FakePrepared(Prepared):
    def __init__(self, kernel, shape, sets, scale):
        self.mode, self.shape, self.sets, self.scale = kernel.mode, shape, sets, scale
        self.res = [None] * len(sets)

    def call(self, i):
        if self.mode == "broken":
            raise RuntimeError("fake kernel failure")
        s, sh = self.sets[i], self.shape
        o, st = oracle_chunked(s["q"], s["k"], s["v"], s["g"], s["beta"], s["h0"], sh.cu, sh.hk, sh.hv, self.scale,
                               dtype=torch.float32)
        self.res[i] = (o.to(torch.bfloat16), st)

    def outputs(self, i):
        return self.res[i]

    def release(self, i):
        self.res[i] = None


# ----------------------------------------------------------------------------------------------
# Timing


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_calls(fns, reps, device):
    """Per-call times (ms) of reps calls cycling over fns: CUDA events on the stream (calls enqueued
    back to back), or wall time on the CPU."""
    if device.type != "cuda":
        out = []
        for r in range(reps):
            t0 = time.perf_counter()
            fns[r % len(fns)]()
            out.append((time.perf_counter() - t0) * 1e3)
        return out
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for r in range(reps):
        starts[r].record()
        fns[r % len(fns)]()
        ends[r].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def percentile(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * p
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def capture_graphs(prep, nsets):
    """One CUDA graph per input set, sharing one memory pool (they replay one at a time, in order,
    and each keeps its outputs referenced). Returns the graphs, or raises."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch asks
        for i in range(nsets):
            prep.call(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    pool = torch.cuda.graph_pool_handle()
    graphs = []
    for i in range(nsets):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            prep.call(i)
        graphs.append(graph)
    torch.cuda.synchronize()
    return graphs


# ----------------------------------------------------------------------------------------------
# Run


def _short(exc, limit=300):
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


def _dist_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_lock():
    wheels, reasons = [], {}
    try:
        with open(LOCK_PATH) as f:
            for line in f:
                line = line.strip()
                if line.startswith("# unavailable: "):
                    peer, _, reason = line[len("# unavailable: "):].partition(": ")
                    reasons[peer] = reason
                elif line and not line.startswith("#"):
                    sha, name = line.split()[:2]
                    wheels.append({"file": name, "sha256": sha})
    except OSError:
        pass
    return wheels, reasons


def lock_reason(peer):
    reason = read_lock()[1].get(peer)
    return f"not carried: {reason}" if reason else None


def provenance(args, di_info):
    prov = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # The output folder is where this run wrote, not what produced it: only its last component.
        "argv": [os.path.basename(a.rstrip("/")) if i > 0 and sys.argv[1:][i - 1] == "--out" else a
                 for i, a in enumerate(sys.argv[1:])],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "versions": {d: _dist_version(d) for d in (
            "triton", "transformers", "fla-core", "flash-linear-attention", "flashinfer-python", "apache-tvm-ffi",
            "flash-qla", "tilelang", "cuda-bindings", "numpy")},
        "peer_wheels_lock": read_lock()[0],
        "deltainfer_build_info": di_info,
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        prov["gpu"] = {"name": p.name, "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                       "memory_mib": p.total_memory // (1 << 20)}
        try:
            prov["gpu"]["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            prov["gpu"]["driver"] = f"unknown ({_short(exc)})"
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20).stdout
            prov["nvcc"] = out.strip().splitlines()[-1] if out.strip() else None
        except (OSError, subprocess.SubprocessError):
            prov["nvcc"] = None
    return prov


def build_kernels(args):
    """The kernel list, with the reason for each one that cannot run at all."""
    kernels, di_info = [], None
    if args.dry_run:
        kernels = [HfTorchKernel(), FakeKernel("oracle-f32"), FakeKernel("unavailable"), FakeKernel("broken")]
    else:
        if args.lib:
            try:
                lib, backends, di_info = load_deltainfer(args.lib)
                for name, backend in backends:
                    kernels.append(DeltaInferKernel(name, backend, lib))
                if not backends:
                    k = Kernel()
                    k.name, k.peer, k.static_reason = "deltainfer", False, "the library lists no backend"
                    kernels.append(k)
            except Exception as exc:  # noqa: BLE001
                k = Kernel()
                k.name, k.peer, k.static_reason = "deltainfer", False, f"cannot load {args.lib}: {_short(exc)}"
                kernels.append(k)
        else:
            k = Kernel()
            k.name, k.peer, k.static_reason = "deltainfer", False, "no --lib given"
            kernels.append(k)
        kernels += [FlaKernel(False), FlaKernel(True), FlashInferKernel(args.flashinfer_workspace),
                    HfTorchKernel()]
    if args.kernels:
        pats = args.kernels.split(",")
        kernels = [k for k in kernels if any(fnmatch.fnmatch(k.name, p) for p in pats)]
    return kernels, di_info


def shape_list(args):
    if args.dry_run:
        return [Shape(hk, hv, mix, lens) for (hk, hv), mix, lens in DRY_RUN_SHAPES]
    heads = QUICK_HEADS if args.quick else HEADS
    mixes = QUICK_MIXES if args.quick else list(MIXES)
    shapes = [Shape(hk, hv, m, MIXES[m]) for hk, hv in heads for m in mixes]
    if args.shapes:
        pats = args.shapes.split(",")
        pool = [Shape(hk, hv, m, MIXES[m]) for hk, hv in HEADS for m in MIXES]
        # In the order of the globs (the matrix's order within one), so that a run short of its
        # time budget has measured the shapes asked for first.
        first = {s.label: next((i for i, p in enumerate(pats) if fnmatch.fnmatch(s.label, p)), None)
                 for s in pool}
        shapes = sorted((s for s in pool if first[s.label] is not None), key=lambda s: first[s.label])
    return shapes


def run_shape(shape, kernels, args, device, deadline):
    res = {"label": shape.label, "hk": shape.hk, "hv": shape.hv, "mix": shape.mix, "lens": shape.lens,
           "tokens": shape.tokens, "results": {}}
    scale = K_DIM ** -0.5
    seed = args.seed * 1000003 + zlib.crc32(shape.label.encode())
    gen = torch.Generator(device=device).manual_seed(seed)
    gates = make_gates(shape, gen, device, args.gates)
    nsets = max(2, math.ceil(args.l2_rotate_mb * 1e6 / shape.set_bytes()))
    nsets = min(nsets, args.max_sets)
    sets = [make_set(shape, gen, device, gates, args.state_std) for _ in range(nsets)]
    res.update(sets=nsets, set_bytes=shape.set_bytes(), gates=gate_stats(sets[0]["g"], shape.cu))

    t0 = time.perf_counter()
    s0 = sets[0]
    ref_o, ref_s = oracle_chunked(s0["q"], s0["k"], s0["v"], s0["g"], s0["beta"], s0["h0"], shape.cu, shape.hk,
                                  shape.hv, scale)
    sync(device)
    res["oracle_s"] = round(time.perf_counter() - t0, 3)

    live = []  # (kernel, prepared, record)
    for kern in kernels:
        rec = res["results"].setdefault(kern.name, {})
        if kern.static_reason:
            rec.update(status="unavailable", reason=kern.static_reason)
            continue
        if time.time() > deadline:
            rec.update(status="skipped", reason="time budget")
            continue
        try:
            prep = kern.prepare(shape, sets, scale)
            rec["scratch"] = ({"bytes": prep.scratch_bytes, "method": "declared (scratch_bytes)"}
                              if prep.scratch_bytes is not None else None)
            t1 = time.perf_counter()
            prep.call(0)  # first call: JIT, autotune
            sync(device)
            rec["first_call_s"] = round(time.perf_counter() - t1, 3)
            est = timed_calls([lambda: prep.call(0)], 1, device)[0]  # the first call may include a JIT build
            rec["estimate_ms"] = est
            acc = accuracy_call(prep, device, ref_o, ref_s)
            rec["accuracy"] = {"kv": acc.pop("acc")} if not kern.peer else {"native": acc.pop("acc")}
            if rec.get("scratch") is None:
                rec["scratch"] = acc.pop("scratch")
            else:
                rec["scratch"]["measured_transient_bytes"] = acc.pop("scratch")["bytes"]
            if isinstance(kern, DeltaInferKernel):  # the other layout: accuracy only
                try:
                    prep_vk = kern.prepare(shape, sets[:1], scale, layout=DI_STATE_VK)
                    prep_vk.call(0)
                    rec["accuracy"]["vk"] = accuracy_call(prep_vk, device, ref_o, ref_s)["acc"]
                    del prep_vk
                except Unavailable as exc:
                    rec["accuracy"]["vk"] = {"status": "unavailable", "reason": str(exc)}
                except Exception as exc:  # noqa: BLE001
                    rec["accuracy"]["vk"] = {"status": "failed", "reason": _short(exc)}
            if est is not None and est > args.max_call_s * 1e3:
                rec.update(status="skipped", reason=f"one call takes {est / 1e3:.2f} s > --max-call-s")
                prep.release(0)
                continue
            rec["status"] = "ok"
            live.append((kern, prep, rec))
        except Unavailable as exc:
            rec.update(status="unavailable", reason=str(exc))
        except Exception as exc:  # noqa: BLE001
            rec.update(status="failed", reason=_short(exc), trace=traceback.format_exc(limit=6))
            if device.type == "cuda" and not cuda_healthy():
                raise RuntimeError(f"CUDA context unusable after {kern.name}: {_short(exc)}") from exc
    del ref_o, ref_s

    # Graphs (or eager calls) per kernel, then interleaved timing rounds.
    runners = []
    for kern, prep, rec in live:
        eager_out = [t.detach().clone() for t in prep.outputs(0)] if device.type == "cuda" else None
        fns, mode = None, "eager-events" if device.type == "cuda" else "eager-wall"
        if device.type == "cuda" and not args.no_graphs:
            try:
                graphs = capture_graphs(prep, nsets)
                fns, mode = [g.replay for g in graphs], "cuda-graph"
                rec["graphs"] = graphs  # kept alive until the shape ends; not serialised
            except Exception as exc:  # noqa: BLE001
                rec["graph_capture_error"] = _short(exc)
                if not cuda_healthy():
                    rec.update(status="failed", reason=f"graph capture broke the CUDA context: {_short(exc)}")
                    raise RuntimeError(rec["reason"]) from exc
        if fns is None:
            fns = [(lambda i=i: prep.call(i)) for i in range(nsets)]
        est = rec.get("estimate_ms") or 1.0
        reps = int(min(args.max_reps, max(args.min_reps, round(args.round_target_s * 1e3 / max(est, 1e-3)))))
        rec["timing"] = {"mode": mode, "reps_per_round": reps, "samples": []}
        runners.append((kern, prep, rec, fns, reps, eager_out))

    stopped = False
    for rnd in range(args.rounds):
        if time.time() > deadline and rnd > 0:
            stopped = True
            break
        order = runners if rnd % 2 == 0 else runners[::-1]
        for kern, prep, rec, fns, reps, _ in order:
            if rec["status"] != "ok":
                continue
            try:
                warm = 1 if (rec.get("estimate_ms") or 0) > 20 else 3
                timed_calls(fns, warm, device)  # warm-up after the previous kernel
                rec["timing"]["samples"] += timed_calls(fns, reps, device)
            except Exception as exc:  # noqa: BLE001
                rec.update(status="failed", reason=f"timing: {_short(exc)}")
    if stopped:
        res["stopped_early"] = "time budget reached during the timing rounds"

    for kern, prep, rec, fns, reps, eager_out in runners:
        t = rec.pop("timing")
        samples = t.pop("samples")
        rec.pop("graphs", None)
        if rec["status"] == "ok" and samples:
            med = percentile(samples, 0.5)
            t.update(median_ms=med, p10_ms=percentile(samples, 0.1), p90_ms=percentile(samples, 0.9),
                     n_samples=len(samples), rounds=args.rounds if not stopped else None)
            rec["timing"] = t
            th = shape.tokens * shape.hv
            rec["th_per_s"] = th / (med * 1e-3)
            rec["tflops"] = th * FLOP_PER_TH / (med * 1e-3) / 1e12
            rec["frac_gemm_peak"] = rec["tflops"] / GEMM_PEAK_TFLOPS
            if device.type == "cuda":  # what a chunk of 64 tokens and one value head costs an SM
                head_chunks = sum((n + CHUNK - 1) // CHUNK for n in shape.lens) * shape.hv
                sms = torch.cuda.get_device_properties(device).multi_processor_count
                rec["sm_us_per_head_chunk"] = sms * med * 1e3 / head_chunks
            if eager_out is not None and t["mode"] == "cuda-graph":
                try:
                    diffs = [float((a.float() - b.float()).abs().nan_to_num(float("inf")).max())
                             for a, b in zip(prep.outputs(0), eager_out)]
                    rec["graph_vs_eager_max_abs"] = max(diffs)
                except Exception as exc:  # noqa: BLE001
                    rec["graph_vs_eager_max_abs"] = f"not comparable: {_short(exc)}"
        for i in range(nsets):
            prep.release(i)
    del runners, live, sets
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return res


def cuda_healthy():
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:  # noqa: BLE001
        return False


def accuracy_call(prep, device, ref_o, ref_s):
    """One call on set 0 with poisoned outputs; error statistics and the scratch the call used
    (peak allocated during the call minus what it leaves allocated, i.e. minus its outputs)."""
    prep.release(0)
    if hasattr(prep, "poison"):
        prep.poison(0)
    else:  # allocating peers: leave NaN-filled free blocks of the output sizes for the allocator
        for size, dtype in ((ref_o.shape, torch.bfloat16), (ref_s.shape, torch.float32)):
            torch.full(tuple(size), float("nan"), dtype=dtype, device=device)  # freed at once
    sync(device)
    scratch = {"bytes": None, "method": "not measured on the CPU"}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    prep.call(0)
    sync(device)
    if device.type == "cuda":
        peak, after = torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()
        scratch = {"bytes": peak - after, "outputs_bytes": after - base,
                   "method": "measured: peak torch allocation during one call minus what it leaves allocated"}
    out, st = prep.outputs(0)
    acc = {"out": err_stats(out, ref_o, OUT_ATOL, OUT_RTOL), "state": err_stats(st, ref_s, STATE_ATOL, STATE_RTOL)}
    acc["pass"] = acc["out"]["n_bad"] == 0 and acc["state"]["n_bad"] == 0
    return {"acc": acc, "scratch": scratch}


# ----------------------------------------------------------------------------------------------
# Report


def fmt_ms(x):
    return "-" if x is None else (f"{x:.3f}" if x < 100 else f"{x:.0f}")


def cell(rec):
    if rec.get("status") == "ok" and rec.get("timing"):
        return f"{fmt_ms(rec['timing']['median_ms'])} ({rec['tflops']:.0f}, {rec['frac_gemm_peak']:.0%})"
    st = rec.get("status", "?")
    return "n/a" if st == "unavailable" else st


def best(shape_res, kernels, peer):
    cands = [(r["timing"]["median_ms"], k.name) for k in kernels if k.peer == peer
             for r in [shape_res["results"].get(k.name, {})] if r.get("status") == "ok" and r.get("timing")]
    return min(cands) if cands else None


# The targets the comparison is run against (docs/benchmarks/gdn-peers.md): the sm90 backend at least
# GOAL_SPEEDUP x the fastest peer on every shape; at least GOAL_FRACTION of the bf16 GEMM rate at
# GOAL_RATE_SHAPE; scratch no larger than FlashInfer's at GOAL_SCRATCH_SHAPE; error statistics (max,
# mean, p99, count past the tolerance, of output and state) no worse than FlashInfer's on every shape.
GOAL_KERNEL = "deltainfer:sm90"
GOAL_SPEEDUP = 1.3
GOAL_FRACTION, GOAL_RATE_SHAPE = 0.65, "16/64@4x8192"
GOAL_SCRATCH_SHAPE = "16/32@1x2048"
ERROR_STATS = ("max_abs", "mean_abs", "p99_abs", "n_bad")


def worse_errors(mine, theirs):
    """The error statistics (tensor.stat) in which `mine` is worse than `theirs`: deltainfer's in the
    [H,K,V] layout it is timed in, a peer's in its own."""
    def timed_layout(rec):
        acc = rec.get("accuracy") or {}
        return acc.get("kv") or acc.get("native")
    a, b = timed_layout(mine), timed_layout(theirs)
    if not a or not b or "out" not in a or "out" not in b:
        return None
    return [f"{t}.{st}" for t in ("out", "state") for st in ERROR_STATS if a[t][st] > b[t][st]]


def goal_lines(report, kernels):
    """The report's "Goals" section: every target, per shape, met or missed and by how much."""
    shapes = [s for s in report["shapes"] if s["results"].get(GOAL_KERNEL, {}).get("status") == "ok"]
    if not shapes:
        return []
    lines = [f"## Goals ({GOAL_KERNEL})", "",
             f"| shape | {GOAL_KERNEL} ms | fastest peer ms | speedup | >= {GOAL_SPEEDUP}x | errors vs flashinfer |",
             "|---" * 6 + "|"]
    met_speed = met_err = 0
    for s in shapes:
        mine = s["results"][GOAL_KERNEL]
        bp = best(s, kernels, True)
        ratio = bp[0] / mine["timing"]["median_ms"] if bp else None
        met_speed += bool(ratio and ratio >= GOAL_SPEEDUP)
        fi = s["results"].get("flashinfer", {})
        worse = worse_errors(mine, fi) if fi.get("status") == "ok" else None
        met_err += worse == []
        err = "no flashinfer result" if worse is None else ("as good or better" if not worse else "worse: " + ", ".join(worse))
        lines.append(f"| {s['label']} | {fmt_ms(mine['timing']['median_ms'])} | "
                     f"{(bp[1] + ' ' + fmt_ms(bp[0])) if bp else '-'} | {f'{ratio:.2f}x' if ratio else '-'} | "
                     f"{'-' if ratio is None else ('yes' if ratio >= GOAL_SPEEDUP else 'no')} | {err} |")
    lines += ["", f"- speedup of at least {GOAL_SPEEDUP}x over the fastest peer: {met_speed} of {len(shapes)} shapes"]
    lines.append(f"- error statistics no worse than FlashInfer's: {met_err} of {len(shapes)} shapes")
    by_label = {s["label"]: s for s in shapes}
    rate = by_label.get(GOAL_RATE_SHAPE)
    if rate:
        frac = rate["results"][GOAL_KERNEL]["frac_gemm_peak"]
        lines.append(f"- {GOAL_RATE_SHAPE}: {frac:.1%} of {GEMM_PEAK_TFLOPS:.0f} TFLOP/s (goal {GOAL_FRACTION:.0%}): "
                     f"{'met' if frac >= GOAL_FRACTION else 'missed'}")
    sc = by_label.get(GOAL_SCRATCH_SHAPE)
    if sc:
        mine = (sc["results"][GOAL_KERNEL].get("scratch") or {}).get("bytes")
        theirs = (sc["results"].get("flashinfer", {}).get("scratch") or {}).get("bytes")
        if mine is not None and theirs is not None:
            lines.append(f"- scratch at {GOAL_SCRATCH_SHAPE}: {mine:,} B against FlashInfer's {theirs:,} B: "
                         f"{'met' if mine <= theirs else 'missed'}")
    return lines + [""]


def write_report(out_dir, report, kernels):
    with open(os.path.join(out_dir, "gdn_peers.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    lines = ["# GDN chunked prefill: deltainfer against peers", ""]
    prov = report["provenance"]
    gpu = prov.get("gpu", {})
    lines += [f"- date (UTC): {prov['date_utc']}; GPU: {gpu.get('name', 'none')} (driver/max SM clock "
              f"{gpu.get('driver', '?')}); torch {prov['torch']} (CUDA {prov['torch_cuda']}); nvcc: {prov.get('nvcc')}",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in prov["versions"].items() if v),
              f"- deltainfer library: {json.dumps(prov.get('deltainfer_build_info'))}",
              f"- FLOP convention: F_fused(C=64) = 2C(2K+2V) + 6KV = {FLOP_PER_TH:,} FLOP per token per value head "
              f"for every kernel; TF/s in brackets; fraction of {GEMM_PEAK_TFLOPS:.0f} TFLOP/s (measured bf16 GEMM) in "
              "the JSON",
              "- time: median of all samples (CUDA events per call, graph replay where capturable; mode per kernel "
              f"in the JSON), {report['config']['rounds']} rounds in A..Z / Z..A order, inputs rotated over sets "
              "exceeding L2",
              f"- accuracy vs a float64 oracle: bad = |err| > atol*rms(ref) + rtol*|ref| or non-finite, rms over "
              f"the tensor; output atol {OUT_ATOL}, rtol {OUT_RTOL}; final state atol {STATE_ATOL}, rtol {STATE_RTOL}",
              "- scratch: deltainfer from scratch_bytes(); peers measured as the peak torch allocation during one "
              "call minus what the call leaves allocated (its outputs)", ""]
    lines += ["## Kernels", "", "| kernel | version | status | notes |", "|---|---|---|---|"]
    for k in kernels:
        lines.append(f"| {k.name} | {k.version or '-'} | {('unavailable: ' + k.static_reason) if k.static_reason else 'loaded'}"
                     f" | {'; '.join(k.notes)} |")
    lines.append("")
    lines += goal_lines(report, kernels)
    timed = [k for k in kernels if not k.static_reason]
    by_heads = {}
    for s in report["shapes"]:
        by_heads.setdefault(f"{s['hk']}/{s['hv']}", []).append(s)
    for heads, shapes in by_heads.items():
        lines += [f"## Heads {heads} (Hk/Hv): time ms (TF/s, fraction of {GEMM_PEAK_TFLOPS:.0f})", "",
                  "| mix | " + " | ".join(k.name for k in timed) + " | best peer | deltainfer best | speedup |",
                  "|---" * (len(timed) + 4) + "|"]
        for s in shapes:
            bp, bd = best(s, kernels, True), best(s, kernels, False)
            sp = f"{bp[0] / bd[0]:.2f}x" if bp and bd else "-"
            lines.append(f"| {s['mix']} | " + " | ".join(cell(s["results"].get(k.name, {})) for k in timed)
                         + f" | {bp[1] + ' ' + fmt_ms(bp[0]) if bp else '-'} | {bd[1] + ' ' + fmt_ms(bd[0]) if bd else '-'}"
                         f" | {sp} |")
        lines += ["", "| mix | kernel | median ms | p10-p90 ms | G th/s | TF/s | SM us a head-chunk | scratch MiB | "
                  "timing | samples |", "|---" * 10 + "|"]
        for s in shapes:
            for name, r in s["results"].items():
                t = r.get("timing")
                if r.get("status") != "ok" or not t:
                    continue
                sc = (r.get("scratch") or {}).get("bytes")
                chunk_us = r.get("sm_us_per_head_chunk")  # absent in reports from before it was recorded
                lines.append(f"| {s['mix']} | {name} | {fmt_ms(t['median_ms'])} | {fmt_ms(t['p10_ms'])}-"
                             f"{fmt_ms(t['p90_ms'])} | {r['th_per_s'] / 1e9:.3g} | {r['tflops']:.1f} | "
                             f"{'-' if chunk_us is None else f'{chunk_us:.2f}'} | "
                             f"{'-' if sc is None else f'{sc / 2**20:.1f}'} | {t['mode']} | {t['n_samples']} |")
        lines.append("")
    lines += ["## Accuracy against the float64 oracle", "",
              "| shape | kernel | layout | out max | out mean | out p99 | out bad | state max | state mean | "
              "state p99 | state bad |", "|---" * 11 + "|"]

    def e(x):
        return "-" if x is None else f"{x:.2e}"
    for s in report["shapes"]:
        for name, rec in s["results"].items():
            for layout, acc in (rec.get("accuracy") or {}).items():
                if "out" not in acc:
                    lines.append(f"| {s['label']} | {name} | {layout} | {acc.get('status')}: {acc.get('reason')} |"
                                 + " |" * 7)
                    continue
                o, st = acc["out"], acc["state"]
                lines.append(f"| {s['label']} | {name} | {layout} | {e(o['max_abs'])} | {e(o['mean_abs'])} | "
                             f"{e(o['p99_abs'])} | {o['n_bad']} | {e(st['max_abs'])} | {e(st['mean_abs'])} | "
                             f"{e(st['p99_abs'])} | {st['n_bad']} |")
    lines.append("")
    problems = [(s["label"], n, r) for s in report["shapes"] for n, r in s["results"].items()
                if r.get("status") in ("failed", "skipped") or (r.get("status") == "unavailable" and
                                                                 not any(k.name == n and k.static_reason for k in kernels))]
    if problems:
        lines += ["## Failed, skipped or refused", ""]
        lines += [f"- {lab} {n}: {r['status']}: {r.get('reason')}" for lab, n, r in problems]
        lines.append("")
    if report.get("stopped"):
        lines += [f"Stopped early: {report['stopped']}", ""]
    with open(os.path.join(out_dir, "gdn_peers.md"), "w") as f:
        f.write("\n".join(lines))


def print_summary(report, kernels):
    log("")
    log(f"{'shape':22} {'deltainfer best':28} {'best peer':28} {'speedup':>8}  accuracy")
    for s in report["shapes"]:
        bp, bd = best(s, kernels, True), best(s, kernels, False)
        accs = [(n, a) for n, r in s["results"].items() for a in (r.get("accuracy") or {}).values() if "pass" in a]
        bad = [n for n, a in accs if not a["pass"]]
        log(f"{s['label']:22} {(bd[1] + ' ' + fmt_ms(bd[0]) + ' ms') if bd else '-':28} "
            f"{(bp[1] + ' ' + fmt_ms(bp[0]) + ' ms') if bp else '-':28} "
            f"{(f'{bp[0] / bd[0]:.2f}x') if bp and bd else '-':>8}  "
            f"{'all pass' if accs and not bad else ('FAIL: ' + ','.join(sorted(set(bad))) if bad else '-')}")


class _ReportedKernel(Kernel):
    """A kernel as a report describes it (for --merge): name, version, availability, notes."""

    def __init__(self, name, rec):
        self.name, self.peer, self.version = name, rec["peer"], rec["version"]
        self.static_reason, self.notes = rec["reason"], tuple(rec["notes"])


def merge_reports_data(paths):
    """One report from the gdn_peers.json of several runs of the same build on the same machine kind
    (the matrix split over several commands): their shapes in order, their provenance side by side."""
    reports = []
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        if r.get("schema") != "gdn_peers/1":
            sys.exit(f"gdn_peers: {path} is not a gdn_peers/1 report (schema {r.get('schema')!r})")
        reports.append(r)
    first = reports[0]
    same = {"deltainfer library": lambda r: r["provenance"].get("deltainfer_build_info"),
            "GPU": lambda r: r["provenance"].get("gpu", {}).get("name"),
            "package versions": lambda r: r["provenance"].get("versions"),
            "kernels": lambda r: sorted(r["kernels"]),
            "FLOP convention and tolerances": lambda r: {k: r["config"][k] for k in ("flop_per_th", "tolerance")}}
    for path, r in zip(paths[1:], reports[1:]):
        for what, key in same.items():
            if key(r) != key(first):
                sys.exit(f"gdn_peers: {path} differs from {paths[0]} in its {what}: {key(r)!r} against {key(first)!r}")
    labels = [s["label"] for r in reports for s in r["shapes"]]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        sys.exit(f"gdn_peers: shapes measured in more than one report: {', '.join(repeated)}")
    merged = dict(first)
    merged["provenance"] = dict(first["provenance"], merged_from=[
        {"file": os.path.basename(os.path.dirname(os.path.abspath(p))) + "/" + os.path.basename(p),
         "date_utc": r["provenance"]["date_utc"], "argv": r["provenance"].get("argv"), "elapsed_s": r.get("elapsed_s"),
         "stopped": r.get("stopped")} for p, r in zip(paths, reports)])
    merged["shapes"] = [s for r in reports for s in r["shapes"]]
    # A shape one command ran out of time for and a later one measured is not skipped.
    merged["skipped_shapes"] = sorted({x for r in reports for x in r.get("skipped_shapes", [])} - set(labels))
    merged["stopped"] = "; ".join(r["stopped"] for r in reports if r.get("stopped")) or None
    merged["elapsed_s"] = round(sum(r.get("elapsed_s") or 0 for r in reports), 1)
    return merged


def merge_reports(paths, out_dir):
    merged = merge_reports_data(paths)
    kernels = [_ReportedKernel(n, rec) for n, rec in merged["kernels"].items()]
    os.makedirs(out_dir, exist_ok=True)
    write_report(out_dir, merged, kernels)
    print_summary(merged, kernels)


def main_run(args):
    start = time.time()
    deadline = start + args.time_budget_s
    device = torch.device(args.device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and device.index is None:  # set_device wants an index
        device = torch.device("cuda", 0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not args.dry_run and device.type != "cuda":
        sys.exit("gdn_peers: a CUDA device is needed (or use --dry-run / --self-test)")
    if args.flashinfer_workspace:  # read when flashinfer is imported
        flashinfer_env(args.flashinfer_workspace)
    if shutil.which("ninja") is None:  # FlashInfer's JIT runs `ninja`; the wheel's copy will do
        try:
            import ninja
            # pip --target puts the binary in <target>/bin, which ninja.BIN_DIR does not look at.
            for d in (os.path.join(os.path.dirname(os.path.dirname(ninja.__file__)), "bin"), ninja.BIN_DIR):
                if d and os.access(os.path.join(d, "ninja"), os.X_OK):
                    os.environ["PATH"] = d + os.pathsep + os.environ.get("PATH", "")
                    break
        except ImportError:
            pass
    os.makedirs(args.out, exist_ok=True)
    kernels, di_info = build_kernels(args)
    shapes = shape_list(args)
    report = {"schema": "gdn_peers/1", "provenance": provenance(args, di_info),
              "config": {"flop_per_th": FLOP_PER_TH, "gemm_peak_tflops": GEMM_PEAK_TFLOPS,
                         "tolerance": {"out": [OUT_ATOL, OUT_RTOL], "state": [STATE_ATOL, STATE_RTOL],
                                       "rule": "|err| > atol*rms(ref) + rtol*|ref| or non-finite"},
                         "rounds": args.rounds, "round_target_s": args.round_target_s,
                         "l2_rotate_mb": args.l2_rotate_mb, "seed": args.seed, "state_std": args.state_std,
                         "gates": args.gates,
                         "graphs": not args.no_graphs, "device": str(device)},
              "kernels": {k.name: {"peer": k.peer, "version": k.version, "available": not k.static_reason,
                                   "reason": k.static_reason, "notes": list(k.notes)} for k in kernels},
              "shapes": []}
    for k in kernels:
        log(f"gdn_peers: {k.name:16} {k.version or '':24} {'unavailable: ' + k.static_reason if k.static_reason else 'ok'}")
    if args.prepare_only:  # warm the JIT caches on a small shape, then stop
        shapes = shapes[:1]
        args.rounds = 1
    for shape in shapes:
        if time.time() > deadline:
            report["stopped"] = f"time budget of {args.time_budget_s} s reached before {shape.label}"
            report.setdefault("skipped_shapes", []).append(shape.label)
            continue
        log(f"gdn_peers: {shape.label} ({shape.tokens} tokens)")
        try:
            report["shapes"].append(run_shape(shape, kernels, args, device, deadline))
        except Exception as exc:  # noqa: BLE001
            report["stopped"] = f"{shape.label}: {_short(exc)}"
            log(f"gdn_peers: stopping: {report['stopped']}")
            write_report(args.out, report, kernels)
            break
        write_report(args.out, report, kernels)  # after every shape: a killed run keeps what it measured
    report["elapsed_s"] = round(time.time() - start, 1)
    write_report(args.out, report, kernels)
    print_summary(report, kernels)


# ----------------------------------------------------------------------------------------------
# Self-test (CPU is enough)


def ctypes_layout_check():
    """Compiles a C probe against include/deltainfer/gdn.h and compares sizes and offsets with the
    ctypes mirror. Skipped (with the reason) without a C compiler or the header."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not os.path.exists(HEADER_PATH):
        return None, "no C compiler or header"
    structs = {"di_gdn_geometry": DiGeometry, "di_gdn_device": DiDevice, "di_gdn_prefill_shape": DiPrefillShape,
               "di_gdn_prefill_args": DiPrefillArgs, "di_gdn_prefill_backend": DiBackend}
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "deltainfer/gdn.h"', "int main(void) {"]
    for cname, cls in structs.items():
        src.append(f'  printf("{cname} %zu\\n", sizeof({cname}));')
        for field, _ in cls._fields_:
            src.append(f'  printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
    src += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src) + "\n")
        inc = os.path.dirname(os.path.dirname(HEADER_PATH))
        subprocess.run([cc, "-std=c11", "-I", inc, c_path, "-o", exe], check=True, capture_output=True)
        got = dict(line.split() for line in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines())
    bad = []
    for cname, cls in structs.items():
        if int(got[cname]) != ctypes.sizeof(cls):
            bad.append(f"sizeof {cname}: C {got[cname]}, ctypes {ctypes.sizeof(cls)}")
        for field, _ in cls._fields_:
            off = getattr(cls, field).offset
            if int(got[f"{cname}.{field}"]) != off:
                bad.append(f"{cname}.{field}: C {got[cname + '.' + field]}, ctypes {off}")
    return bad, None


def self_test(args):
    device = torch.device(args.device or "cpu")
    torch.manual_seed(1)
    failures = []

    def check(name, ok, detail):
        log(f"self-test: {'ok  ' if ok else 'FAIL'} {name}: {detail}")
        if not ok:
            failures.append(name)

    # Chunked oracle == token recurrence: ragged lengths (0, 1, exact chunk, chunk + 1, several
    # chunks), GVA, gates from no decay to full decay, beta near 0 and 1.
    for hk, hv, lens, regime in [(2, 4, [1, 63, 64, 65, 130, 0, 7], "mixed"), (1, 3, [200], "strong"),
                                 (2, 2, [129, 3], "none")]:
        sh = Shape(hk, hv, "+".join(map(str, lens)), lens)
        gen = torch.Generator(device=device).manual_seed(7)
        s = make_set(sh, gen, device, make_gates(sh, gen, device), args.state_std)
        if regime == "strong":
            s["g"] = s["g"] * 8 - 2
        elif regime == "none":
            s["g"] = torch.zeros_like(s["g"])
            s["beta"] = torch.where(torch.rand_like(s["beta"]) < 0.5, 1e-4, 0.9999)
        args_ = (s["q"], s["k"], s["v"], s["g"], s["beta"], s["h0"], sh.cu, hk, hv, K_DIM ** -0.5)
        ref_o, ref_s = oracle_tokens(*[a.cpu() if torch.is_tensor(a) else a for a in args_])
        for chunk in (64, 16):
            o, st = oracle_chunked(*args_, chunk=chunk)
            eo = float((o.cpu() - ref_o).abs().max() / ref_o.abs().max())
            es = float((st.cpu() - ref_s).abs().max() / ref_s.abs().max())
            check(f"oracle C={chunk} {sh.label} g={regime}", eo < 1e-10 and es < 1e-10,
                  f"max rel err out {eo:.1e}, state {es:.1e}")
        bad_o = ref_o.clone().to(torch.bfloat16)  # an unwritten (NaN) element is caught
        bad_o[0, 0, 0] = float("nan")
        st_nan = err_stats(bad_o, ref_o, OUT_ATOL, OUT_RTOL)
        check(f"err_stats counts NaN {sh.label}", st_nan["n_nonfinite"] == 1 and st_nan["n_bad"] >= 1,
              f"{st_nan['n_bad']} bad")

    # A bf16 kernel done right meets the tolerance; the same with a wrong convention does not.
    sh = Shape(2, 4, "300+100", [300, 100])
    gen = torch.Generator(device=device).manual_seed(3)
    s = make_set(sh, gen, device, make_gates(sh, gen, device), args.state_std)
    base = (s["v"], s["g"], s["beta"], s["h0"], sh.cu, sh.hk, sh.hv, K_DIM ** -0.5)
    ref_o, ref_s = oracle_chunked(s["q"], s["k"], *base)
    good_o, good_s = oracle_chunked(l2norm_bf16(s["q"]), l2norm_bf16(s["k"]), *base, dtype=torch.float32)
    acc_o = err_stats(good_o.to(torch.bfloat16), ref_o, OUT_ATOL, OUT_RTOL)
    acc_s = err_stats(good_s, ref_s, STATE_ATOL, STATE_RTOL)
    check("tolerance: f32 math, bf16 q/k/out", acc_o["n_bad"] == 0 and acc_s["n_bad"] == 0,
          f"out max {acc_o['max_abs']:.2e} (ref rms {acc_o['ref_rms']:.2e}), state max {acc_s['max_abs']:.2e} "
          f"(ref rms {acc_s['ref_rms']:.2e})")
    r = sh.hv // sh.hk
    wrongs = {
        "gate domain (alpha for log g)": oracle_chunked(s["q"], s["k"], s["v"], torch.exp(s["g"]) - 1, *base[2:]),
        "head map h % Hk": oracle_chunked(s["q"].repeat(1, r, 1), s["k"].repeat(1, r, 1), *base[:5], sh.hv, sh.hv,
                                          K_DIM ** -0.5),
        "state orientation": oracle_chunked(s["q"], s["k"], *base[:3], s["h0"].transpose(-1, -2), *base[4:]),
    }
    for what, (wo, ws) in wrongs.items():
        eo, es = err_stats(wo, ref_o, OUT_ATOL, OUT_RTOL), err_stats(ws, ref_s, STATE_ATOL, STATE_RTOL)
        check(f"tolerance: a wrong {what} fails", eo["n_bad"] + es["n_bad"] > 0,
              f"out {eo['n_bad']} of {eo['n']} bad, state {es['n_bad']} of {es['n']} bad")
    gs = gate_stats(s["g"], sh.cu)
    check("gates in a realistic range", gs["g_p50"] < 0 and 0.5 < gs["alpha_p50"] < 0.999,
          ", ".join(f"{k} {v:.3g}" for k, v in gs.items()))
    sh_slow = Shape(2, 8, "4096", [4096])
    gen = torch.Generator(device=device).manual_seed(5)
    g_slow = make_set(sh_slow, gen, device, make_gates(sh_slow, gen, device, "slow"), args.state_std)["g"]
    gs = gate_stats(g_slow, sh_slow.cu)
    # No 2,048 tokens of any head decay to e^-10: the sum of g over every 32 chunks stays above -10.
    worst = float(g_slow.double().reshape(-1, 2048, sh_slow.hv).sum(1).min())
    check("slow gates: no head forgets in 2,048 tokens", worst > -10 and gs["frac_chunks_decay_above_1e-3"] == 1.0
          and math.log(0.999) < gs["g_p01"] and gs["g_p99"] < 0,
          f"lowest sum of g over 2,048 tokens {worst:.3g}, " + ", ".join(f"{k} {v:.3g}" for k, v in gs.items()))

    # The HF torch fallback (when transformers is installed) agrees with the oracle in f32.
    hf = HfTorchKernel()
    if hf.static_reason:
        log(f"self-test: skip HF fallback: {hf.static_reason}")
    else:
        p = hf.prepare(sh, [s], K_DIM ** -0.5)
        p.call(0)
        o, st = p.outputs(0)
        acc_o, acc_s = err_stats(o, ref_o, OUT_ATOL, OUT_RTOL), err_stats(st, ref_s, STATE_ATOL, STATE_RTOL)
        check("HF torch fallback vs oracle", acc_o["n_bad"] == 0 and acc_s["n_bad"] == 0,
              f"out max {acc_o['max_abs']:.2e}, state max {acc_s['max_abs']:.2e}")

    # ctypes mirror == C header.
    try:
        bad, skip = ctypes_layout_check()
        if skip:
            log(f"self-test: skip ctypes layout: {skip}")
        else:
            check("ctypes structs match include/deltainfer/gdn.h", not bad, "; ".join(bad) or "sizes and offsets equal")
    except subprocess.CalledProcessError as exc:
        check("ctypes layout probe compiles", False, (exc.stderr or b"").decode()[-500:])

    # --shapes runs in the globs' order; --merge keeps a shape one command skipped and another measured
    # out of the skipped list, and refuses a shape measured twice.
    class _ShapeArgs:
        dry_run, quick, shapes = False, False, "2/8@1x*,16/32@4x8192,*@4096+28672"
    order = [x.label for x in shape_list(_ShapeArgs)]
    check("--shapes in the globs' order", order[:4] == ["2/8@1x2048", "2/8@1x8192", "2/8@1x32768", "16/32@4x8192"]
          and order[4:] == [f"{h}@4096+28672" for h in ("16/32", "16/48", "16/64", "4/16", "2/8")], ", ".join(order))
    with tempfile.TemporaryDirectory() as tmp:
        def part(name, labels, skipped):
            path = os.path.join(tmp, name + ".json")
            with open(path, "w") as f:
                json.dump({"schema": "gdn_peers/1", "provenance": {"date_utc": "-"}, "config": {"flop_per_th": 1, "tolerance": {}},
                           "kernels": {}, "shapes": [{"label": x} for x in labels], "skipped_shapes": skipped}, f)
            return path
        a, b = part("a", ["2/8@1x2048"], ["2/8@1x8192", "2/8@1x32768"]), part("b", ["2/8@1x8192"], [])
        merged = merge_reports_data([a, b])
        check("--merge: skipped only where no command measured", merged["skipped_shapes"] == ["2/8@1x32768"]
              and [x["label"] for x in merged["shapes"]] == ["2/8@1x2048", "2/8@1x8192"], repr(merged["skipped_shapes"]))
        try:
            merge_reports_data([a, part("c", ["2/8@1x2048"], [])])
            check("--merge refuses a shape measured twice", False, "merged")
        except SystemExit as exc:
            check("--merge refuses a shape measured twice", "more than one report" in str(exc), str(exc))

    # A built library, when given: its backends, build info, supports() and scratch_bytes() (no GPU needed).
    if args.lib:
        try:
            _, backends, info = load_deltainfer(args.lib)
            check("library lists backends", bool(backends), f"{[n for n, _ in backends]}, build info {info}")
            dev = DiDevice(9, 0, 132, 232448)
            for name, b in backends:
                for layout in (DI_STATE_KV, DI_STATE_VK):
                    st, reason = di_supports(b, 16, 64, dev, layout)
                    sc = b.scratch_bytes(ctypes.byref(DiPrefillShape(DiGeometry(16, 64, 128, 128), 4, 32768, 8192)))
                    log(f"self-test: {name} layout {layout}: supports {DI_STATUS.get(st, st)} {reason!r}, "
                        f"scratch {sc} B at 16/64 4x8192")
        except OSError as exc:
            log(f"self-test: skip library checks: {_short(exc)}")

    log(f"self-test: {'passed' if not failures else 'FAILED: ' + ', '.join(failures)}")
    return 0 if not failures else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libdeltainfer_gdn.so (the C ABI of include/deltainfer/gdn.h)")
    ap.add_argument("--out", help="folder for gdn_peers.json and gdn_peers.md")
    ap.add_argument("--quick", action="store_true", help="heads 16/32 and 2/8 x mixes 1x2048, 8x2048, 4096+28672")
    ap.add_argument("--shapes", help="comma list of globs on 'Hk/Hv@mix', e.g. '16/64@*,2/8@1x32768'; run in the globs' order")
    ap.add_argument("--kernels", help="comma list of globs on kernel names, e.g. 'deltainfer:*,flashinfer'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=4, help="timing rounds, alternately forward and reversed")
    ap.add_argument("--round-target-s", type=float, default=0.25, help="time per kernel per round")
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--max-reps", type=int, default=200)
    ap.add_argument("--max-call-s", type=float, default=2.0, help="skip timing a kernel whose call takes longer")
    ap.add_argument("--time-budget-s", type=float, default=540.0, help="stop starting new work after this")
    ap.add_argument("--l2-rotate-mb", type=float, default=200.0, help="input bytes one rotation covers")
    ap.add_argument("--max-sets", type=int, default=64)
    ap.add_argument("--gates", choices=sorted(GATE_REGIMES), default="mamba2-init",
                    help="the decay regime of g (GATE_REGIMES): mamba2-init, or slow (every head's decay above 0.999)")
    ap.add_argument("--state-std", type=float, default=0.15,
                    help="std of the random initial state (the recurrence settles at an rms of 0.07-0.24)")
    ap.add_argument("--no-graphs", action="store_true", help="time eager calls only")
    ap.add_argument("--device", help="torch device (default cuda, or cpu for --self-test)")
    ap.add_argument("--flashinfer-workspace",
                    help="FLASHINFER_WORKSPACE_BASE for its JIT cache (keep it out of --out); a GDN module "
                         "prebuilt there is loaded without compiling")
    ap.add_argument("--prebuild-flashinfer", action="store_true",
                    help="compile FlashInfer's SM90 GDN module into --flashinfer-workspace (no GPU needed), then exit")
    ap.add_argument("--prepare-only", action="store_true", help="load every kernel and run one small shape (JIT warm-up)")
    ap.add_argument("--dry-run", action="store_true", help="oracle, HF fallback and fake kernels at tiny shapes")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="write one report to --out from the gdn_peers.json of several runs of one build")
    ap.add_argument("--self-test", action="store_true", help="check the oracle and the ctypes mirror, then exit")
    args = ap.parse_args()
    if args.quick and args.round_target_s == 0.25:
        args.round_target_s = 0.05
    if args.self_test:
        sys.exit(self_test(args))
    if args.prebuild_flashinfer:
        if not args.flashinfer_workspace:
            ap.error("--prebuild-flashinfer needs --flashinfer-workspace")
        sys.exit(prebuild_flashinfer(args.flashinfer_workspace))
    if not args.out:
        ap.error("--out is required")
    if args.merge:
        sys.exit(merge_reports(args.merge, args.out))
    with torch.no_grad():  # forward only: no autograd records (FLA's FlashQLA check reads this too)
        main_run(args)


if __name__ == "__main__":
    main()
