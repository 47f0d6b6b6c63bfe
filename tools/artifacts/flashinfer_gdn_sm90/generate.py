"""Compiles FlashInfer's SM90 GDN prefill (CuTe DSL) ahead of time into deltainfer's bundle.

Run by generate.sh inside its pinned environment. For each state layout deltainfer uses it:
  1. checks the kernel source against pins.lock, applies aot.patch, checks the result;
  2. compiles the kernel for sm_90a with fake tensors (no GPU, no CUDA driver needed): bf16
     activations, f32 gates and states, int32 cu_seqlens, slot-indexed state pools whose unit-stride
     mode selects the layout;
  3. exports it to C (CuTe DSL's export_to_c: a header, a host object with the embedded cubin) and
     keeps the PTX and cubin;
  4. links the object, CuTe's static runtime and bridge.c into one shared object that exports three
     stable symbols;
then writes manifest.json (pins, toolchain, entry symbols, parameter layout, SHA-256 of every file).
"""

import argparse
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile

HEAD_DIM = 128
# deltainfer's state layouts -> the state-pool mode with unit stride in the kernel's [slot, head, V, K]
# view: "vk" is [H,V,K] (K contiguous, DI_GDN_STATE_VK), "kv" is [H,K,V] (V contiguous, DI_GDN_STATE_KV).
VARIANTS = {"vk": 3, "kv": 2}
KERNEL_SOURCE = "flashinfer/gdn_kernels/delta_rule_dsl/delta_rule_sm90.py"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_pins(path):
    pins = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, digest, name = line.split()
        pins.setdefault(kind, {})[name] = digest
    return pins


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def check_and_patch_source(pins, patch):
    """The installed kernel source must be the pinned one; it is patched in place (the environment
    belongs to the generator) and must then match the pinned result."""
    import importlib.util

    # Located without importing: importing flashinfer would load the unpatched kernel module.
    site = pathlib.Path(importlib.util.find_spec("flashinfer").submodule_search_locations[0]).parent
    source = site / KERNEL_SOURCE
    digest = sha256(source)
    if digest == pins["patched"][KERNEL_SOURCE]:
        return source  # patched by an earlier run
    if digest != pins["source"][KERNEL_SOURCE]:
        fail(f"{KERNEL_SOURCE} has SHA-256 {digest}, pins.lock pins {pins['source'][KERNEL_SOURCE]}: "
             "the environment holds another flashinfer build; delete .deps/flashinfer-gdn-venv and run generate.sh")
    if sha256(patch) != pins["patch"]["aot.patch"]:
        fail(f"aot.patch has SHA-256 {sha256(patch)}, pins.lock pins {pins['patch']['aot.patch']}")
    subprocess.run(["patch", "-p1", "--quiet", "-d", str(site), "-i", str(patch)], check=True)
    digest = sha256(source)
    if digest != pins["patched"][KERNEL_SOURCE]:
        fail(f"patched {KERNEL_SOURCE} has SHA-256 {digest}, pins.lock pins {pins['patched'][KERNEL_SOURCE]}")
    return source


def compile_variant(name, unit_stride_mode, workdir):
    import cuda.bindings.driver as cuda_driver
    import cutlass
    import cutlass.cute as cute
    import torch
    from flashinfer.gdn_kernels.delta_rule_dsl import delta_rule_sm90 as sm90

    inner = (HEAD_DIM * HEAD_DIM, HEAD_DIM, 1) if unit_stride_mode == 3 else (HEAD_DIM * HEAD_DIM, 1, HEAD_DIM)
    kernel = sm90._get_prefill_kernel(
        True, True, True, False, cutlass.BFloat16,  # alpha, beta, initial state; no checkpoints
        initial_state_dtype=torch.float32, state_dtype=torch.float32, checkpoint_state_dtype=torch.float32,
        use_state_indices=True, cu_seqlens_dtype=torch.int32, state_indices_dtype=torch.int32,
        checkpoint_cu_starts_dtype=None, state_inner_strides=inner, init_state_inner_strides=inner,
        output_state_indices_dtype=torch.int32)

    def sym32():
        return cute.sym_int32()

    def sym64():
        return cute.sym_int64()

    fake = cute.runtime.make_fake_tensor
    bf16, f32, i32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32

    def token_major():  # k, v, o: [D, T, H], D contiguous
        return fake(bf16, (sym32(), sym32(), sym32()), (1, sym64(), sym64()), assumed_align=16)

    def vector(dtype, align):
        return fake(dtype, (sym32(),), (1,), assumed_align=align)

    def state_pool():
        stride = [sym64(), sym64(), sym64(), sym64()]
        stride[unit_stride_mode] = 1
        return fake(f32, (sym32(), sym32(), sym32(), sym32()), tuple(stride), assumed_align=16)

    q = fake(bf16, (sym32(), sym32(), sym32()), (sym64(), 1, sym64()), assumed_align=16)  # [T, D, H]
    args = (q, token_major(), token_major(), token_major(),
            vector(f32, 16), vector(f32, 16),               # alpha, beta
            state_pool(), state_pool(), vector(i32, 4),    # final pool, initial pool, read slots
            None, None,                                    # checkpoints, checkpoint starts
            vector(cutlass.Uint8, 128), vector(i32, 8),    # tensormap workspace, cu_seqlens
            f32(1.0), i32(1), i32(1), i32(1), i32(1), i32(1), i32(1), i32(0),
            vector(i32, 4), None, None,                    # write slots, checkpoint rows, prefix lengths
            i32(1), cuda_driver.CUstream(0))
    dump = pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"])  # set before cutlass was imported
    for stale in dump.iterdir():
        stale.unlink()
    compiled = cute.compile(kernel, *args, options="--gpu-arch sm_90a")
    prefix = f"fi_gdn_sm90_{name}"
    compiled.export_to_c(str(workdir), prefix, function_prefix=prefix)
    ptxs, cubins = list(dump.glob("*.ptx")), list(dump.glob("*.cubin"))
    if len(ptxs) != 1 or len(cubins) != 1:
        fail(f"expected one PTX and one cubin from compiling the {name} variant, got {ptxs + cubins}")
    ptx, cubin = workdir / f"{prefix}.kept.ptx", workdir / f"{prefix}.kept.cubin"
    shutil.move(ptxs[0], ptx)
    shutil.move(cubins[0], cubin)
    entry = next(line.split()[2].rstrip("(") for line in ptx.read_text().splitlines()
                 if line.startswith(".visible .entry"))
    return prefix, ptx, cubin, entry


def link_variant(prefix, workdir, bridge, out):
    import nvidia_cutlass_dsl

    source_root = pathlib.Path(__file__).resolve().parents[3] / "src"  # gdn/flashinfer_launch.h

    runtime = pathlib.Path(list(nvidia_cutlass_dsl.__path__)[0]) / "cu13" / "lib" / "libcuda_dialect_runtime_static.a"
    cuda_home = pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    shared = out / f"{prefix}.so"
    exports = workdir / "exports.map"
    exports.write_text("{ global: di_flashinfer_gdn_*; local: *; };\n")
    cmd = ["gcc", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", f"-DDI_EXPORT_PREFIX={prefix}",
           "-include", str(workdir / f"{prefix}.h"), f"-I{cuda_home}/include", f"-I{source_root}",
           "-o", str(shared), str(bridge),
           str(workdir / f"{prefix}.o"), str(runtime), f"-L{cuda_home}/lib64", "-lcudart_static",
           "-ldl", "-lpthread", "-lrt", f"-Wl,--version-script={exports}", "-Wl,--exclude-libs,ALL",
           "-Wl,--no-undefined", "-Wl,--build-id=sha1"]
    subprocess.run(cmd, check=True)
    return shared, runtime


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--pins", required=True)
    parser.add_argument("--patch", required=True)
    parser.add_argument("--bridge", required=True)
    parser.add_argument("--wheels", required=True)
    opts = parser.parse_args()
    pins = read_pins(opts.pins)
    check_and_patch_source(pins, pathlib.Path(opts.patch))

    out = pathlib.Path(opts.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        (workdir / "dump").mkdir()
        # CuTe DSL reads its settings when it is imported: the target, and keeping the PTX and cubin.
        os.environ["CUTE_DSL_ARCH"] = "sm_90a"
        os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
        os.environ["CUTE_DSL_DUMP_DIR"] = str(workdir / "dump")
        import cutlass
        for name, unit_mode in VARIANTS.items():
            prefix, ptx, cubin, entry = compile_variant(name, unit_mode, workdir)
            shutil.copyfile(ptx, out / f"{prefix}.ptx")
            shutil.copyfile(cubin, out / f"{prefix}.cubin")
            shutil.copyfile(workdir / f"{prefix}.h", out / f"{prefix}.h")
            shared, runtime = link_variant(prefix, workdir, pathlib.Path(opts.bridge), out)
            ptx_text = (out / f"{prefix}.ptx").read_text()
            variants[name] = {
                "state_layout": "[H,V,K]" if name == "vk" else "[H,K,V]",
                "library": shared.name,
                "cubin": f"{prefix}.cubin",
                "ptx": f"{prefix}.ptx",
                "header": f"{prefix}.h",
                "kernel_entry": entry,
                "exported_prefix": prefix,
                "hgmma_in_ptx": ptx_text.count("wgmma.mma_async"),
            }
        runtime_sha = sha256(runtime)

    files = sorted(p.name for p in out.iterdir())
    manifest = {
        "bundle": "flashinfer-gdn-sm90",
        "format": 1,
        "kernel": "FlashInfer SM90 chunked gated delta rule prefill (CuTe DSL), "
                  "flashinfer/gdn_kernels/delta_rule_dsl/delta_rule_sm90.py",
        "target": "sm_90a",
        "sources": {
            "wheels": {name: digest for name, digest in pins["wheel"].items()},
            "kernel_source_sha256": pins["source"][KERNEL_SOURCE],
            "patch_sha256": pins["patch"]["aot.patch"],
            "patched_source_sha256": pins["patched"][KERNEL_SOURCE],
            "cute_dsl_static_runtime_sha256": runtime_sha,
            "bridge_sha256": sha256(opts.bridge),
            "launch_abi_header_sha256": sha256(pathlib.Path(__file__).resolve().parents[3] / "src" / "gdn" /
                                               "flashinfer_launch.h"),
        },
        "toolchain": {
            "cutlass_dsl": cutlass.__version__,
            "ptx_compiler": next((line[3:].strip() for line in (out / "fi_gdn_sm90_vk.ptx").read_text().splitlines()
                                  if line.startswith("// Cuda compilation tools")), "unknown"),
            "gcc": tool_version(["gcc", "--version"]),
            "ld": tool_version(["ld", "--version"]),
            "python": platform.python_version(),
        },
        "specialisation": {
            "dtype": "bf16 q, k, v, out; f32 alpha (= exp(g)), beta, states",
            "head_dim": HEAD_DIM,
            "heads": "num_q_heads == num_k_heads = Hk, num_v_heads = num_sab_heads = Hv, Hv % Hk == 0",
            "cu_seqlens": "int32",
            "state": "slot-indexed pools; read slot < 0: zero initial state; write slot < 0: not written",
            "grid": "num_seqs * Hv CTAs of 512 threads, one per SM (128-byte tensormap scratch per SM id)",
        },
        "entry_symbols": ["di_flashinfer_gdn_abi", "di_flashinfer_gdn_load", "di_flashinfer_gdn_launch"],
        "launch_abi": 1,
        "parameter_layout": "di_flashinfer_gdn_launch_args (src/gdn/flashinfer_launch.h): q, k, v, out, alpha, beta, final_state, "
                            "initial_state, read_slot, write_slot, tensormaps, cu_seqlens (pointers); "
                            "total_tokens, tensormap_bytes (int64); num_seqs, num_k_heads, num_v_heads, "
                            "num_slots (int32); scale (float)",
        "variants": variants,
        "sha256": {name: sha256(out / name) for name in files},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"bundle written to {out}:")
    for name in files:
        print(f"  {manifest['sha256'][name]}  {name}")


if __name__ == "__main__":
    main()
