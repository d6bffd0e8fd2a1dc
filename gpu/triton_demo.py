"""Parity and speed of the Triton flash-attention build (issue 43, item 3) against torch's sdpa, on a GPU.

1. Writes the build-variant folder with gpu/build_triton_kernel.py and imports it as a package (the files a Hub
   serves), so every figure below comes from that build (its CALL_COUNTS are printed).
2. Parity, blocks at their defaults (no autotuning): forward output and dQ/dK/dV, bf16 and fp16, causal and not,
   MHA and GQA, seqlens 1024, 2048 and 1000, head dims 128 and 64, a bottom-right causal case (seqlen_q < seqlen_k)
   and varlen batches of 3 sequences. Each error is the max abs difference from a float32 sdpa reference; the case
   passes when the Triton error is at most twice sdpa's own (in the same dtype) plus 1e-3 * max |reference|.
3. Speed, blocks autotuned: fwd and fwd+bwd at b8 s2048 h32 kv8 d128 bf16, causal and not (median ms of
   triton.testing.do_bench), peak memory of fwd+bwd, and one more parity row with the tuned blocks.
4. A training step of a Llama-style model (8 layers, hidden 4096, 32 heads / 8 KV heads, head dim 128,
   intermediate 12288, vocab 32000, bf16, batch 8 x 2048 tokens, AdamW): sdpa vs an attention function registered
   through transformers' AttentionInterface that calls the build's flash_attn_func. Median of 5 steps after 2.

Prints markdown tables, writes them to OUT/triton-demo.md (``--out``, else $OUT, else ./triton-demo-out), exits 1 if
a parity case fails. ``--cpu``: a dry run on the CPU with Triton's interpreter (tiny shapes, fp16 and fp32; the
interpreter computes bf16 dots wrongly), speed left out. On the GPU machine, from the repository root, with the
recipe's wheels (gpu/README.md): ``PYTHONPATH="$PWD:/tmp/site" python3 gpu/triton_demo.py --out "$OUT"``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

if "--cpu" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["KERNLOCK_FA_AUTOTUNE"] = "0"  # parity with the default blocks; the speed part turns autotuning on

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "gpu")]


class Report:
    """Prints each part and keeps it as markdown."""

    def __init__(self) -> None:
        self.parts = ["# Triton flash-attention build vs sdpa\n"]

    def text(self, text: str) -> None:
        print(text, flush=True)
        self.parts.append(text + "\n")

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        self.text("\n".join(lines) + "\n")

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "triton-demo.md"
        path.write_text("\n".join(self.parts))
        return path


def load_build(folder: Path) -> ModuleType:
    """Import a written build-variant folder as a package, as the kernels loader does."""
    spec = importlib.util.spec_from_file_location(
        "flash_attn2_triton_build", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sdpa(q, k, v, causal: bool, scale: float):
    """torch's sdpa on (b, s, h, d) tensors, GQA through enable_gqa, causal aligned bottom-right."""
    sq, sk = q.shape[1], k.shape[1]
    mask = None
    if causal and sq != sk:
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal and sq == sk, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


def parity_case(
    fa,
    dtype,
    device,
    *,
    batch=2,
    sq=1024,
    sk=None,
    heads=8,
    kv_heads=8,
    dim=128,
    causal=False,
    lens_q=None,
    lens_k=None,
) -> tuple[list[tuple[float, float]], bool]:
    """[(triton error, sdpa error)] for out, dq, dk, dv against a float32 reference; and whether it passes."""
    gen = torch.Generator(device=device).manual_seed(0)
    sk = sk or sq
    if lens_q:
        lens_k = lens_k or lens_q
        shapes = [(sum(lens_q), heads, dim), (sum(lens_k), kv_heads, dim)]
    else:
        shapes = [(batch, sq, heads, dim), (batch, sk, kv_heads, dim)]
    base = [torch.randn(s, generator=gen, device=device) for s in (shapes[0], shapes[1], shapes[1], shapes[0])]
    scale = dim**-0.5

    def run(fn, cast):
        q, k, v = (t.to(cast, copy=True).requires_grad_() for t in base[:3])
        out = fn(q, k, v)
        out.backward(base[3].to(cast))
        return [t.detach().float() for t in (out, q.grad, k.grad, v.grad)]

    def sdpa(q, k, v):
        if not lens_q:
            return _sdpa(q, k, v, causal, scale)
        cq, ck = [0, *torch.tensor(lens_q).cumsum(0).tolist()], [0, *torch.tensor(lens_k).cumsum(0).tolist()]
        bounds = zip(cq[:-1], cq[1:], ck[:-1], ck[1:], strict=True)
        pieces = [(q[None, a:b], k[None, c:d], v[None, c:d]) for a, b, c, d in bounds]
        return torch.cat([_sdpa(*piece, causal, scale)[0] for piece in pieces])

    def triton_fn(q, k, v):
        if not lens_q:
            return fa.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        cq = torch.tensor([0, *lens_q], device=device).cumsum(0).to(torch.int32)
        ck = torch.tensor([0, *lens_k], device=device).cumsum(0).to(torch.int32)
        return fa.flash_attn_varlen_func(q, k, v, cq, ck, max(lens_q), max(lens_k), softmax_scale=scale, causal=causal)

    reference, theirs, ours = run(sdpa, torch.float32), run(sdpa, dtype), run(triton_fn, dtype)
    errors, ok = [], True
    for r, t, o in zip(reference, theirs, ours, strict=True):
        err_o, err_t = float((o - r).abs().max()), float((t - r).abs().max())
        errors.append((err_o, err_t))
        ok &= err_o <= 2 * err_t + 1e-3 * float(r.abs().max())
    return errors, ok


def parity(fa, report: Report, device: str, cpu: bool) -> bool:
    bf16, fp16, fp32 = torch.bfloat16, torch.float16, torch.float32
    cases = []
    if cpu:  # the interpreter: tiny shapes; bf16 dots are wrong in the interpreter itself
        for dtype in (fp16, fp32):
            for causal in (False, True):
                for kv in (4, 2):
                    cases.append((dtype, dict(batch=1, sq=70, heads=4, kv_heads=kv, dim=32, causal=causal)))
        cases.append((fp16, dict(batch=1, sq=30, sk=90, heads=4, kv_heads=2, dim=16, causal=True)))
        cases.append((fp16, dict(heads=4, kv_heads=2, dim=16, causal=True, lens_q=[10, 40, 17])))
        cases.append((fp32, dict(heads=4, kv_heads=2, dim=16, causal=True, lens_q=[5, 33, 17], lens_k=[9, 40, 17])))
    else:
        for dtype in (bf16, fp16):
            for causal in (False, True):
                for kv in (8, 2):
                    for sq in (1024, 2048, 1000):
                        cases.append((dtype, dict(sq=sq, kv_heads=kv, causal=causal)))
        cases.append((bf16, dict(sq=1000, kv_heads=2, dim=64, causal=True)))
        cases.append((bf16, dict(sq=300, sk=1000, kv_heads=2, causal=True)))
        lens = [300, 1000, 517]
        cases.append((bf16, dict(kv_heads=2, causal=True, lens_q=lens)))
        cases.append((bf16, dict(kv_heads=8, causal=False, lens_q=lens)))
        cases.append((bf16, dict(kv_heads=2, causal=True, lens_q=[100, 700, 517], lens_k=lens)))
    rows, all_ok = [], True
    for dtype, kw in cases:
        errors, ok = parity_case(fa, dtype, device, **kw)
        all_ok &= ok
        rows.append([_case_name(dtype, kw), *(f"{o:.1e} / {t:.1e}" for o, t in errors), "PASS" if ok else "FAIL"])
    report.text("## Parity (Triton error / sdpa error, max abs vs a float32 sdpa reference; default blocks)\n")
    report.table(["case", "out", "dQ", "dK", "dV", "result"], rows)
    return all_ok


def _case_name(dtype, kw) -> str:
    heads, kv = kw.get("heads", 8), kw["kv_heads"]
    kind = ("MHA" if heads == kv else "GQA") + f" h{heads}/kv{kv}"
    if "lens_q" in kw:
        shape = f"varlen q{kw['lens_q']} k{kw.get('lens_k') or kw['lens_q']}"
    else:
        sk = kw.get("sk") or kw["sq"]
        shape = f"b{kw.get('batch', 2)} s{kw['sq']}" + (f"->{sk}" if sk != kw["sq"] else "")
    mask = "causal" if kw["causal"] else "full"
    return f"{str(dtype).removeprefix('torch.')} {shape} {kind} d{kw.get('dim', 128)} {mask}"


def speed(fa, report: Report) -> None:
    from triton.testing import do_bench

    b, s, h, kv, d = 8, 2048, 32, 8, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, do = (torch.randn(b, s, h, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(b, s, kv, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    layouts = {"triton": (q, k, v, do), "sdpa": tuple(t.transpose(1, 2).contiguous() for t in (q, k, v, do))}
    repeated = (t.repeat_interleave(h // kv, dim=1) for t in layouts["sdpa"][1:3])  # K/V repeated beforehand
    layouts["sdpa, K/V repeated"] = (layouts["sdpa"][0], *repeated, layouts["sdpa"][3])
    rows = []
    for causal in (True, False):
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        for name, (q_, k_, v_, do_) in layouts.items():

            def fn(q_=q_, k_=k_, v_=v_, name=name, causal=causal):
                if name == "triton":
                    return fa.flash_attn_func(q_, k_, v_, causal=causal)
                return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal, enable_gqa=True)

            fwd = do_bench(fn, warmup=25, rep=200, return_mode="median")
            leaves = [t.detach().requires_grad_() for t in (q_, k_, v_)]

            def step(leaves=leaves, fn=fn, do_=do_):
                fn(*leaves).backward(do_)

            both = do_bench(step, warmup=25, rep=200, grad_to_none=leaves, return_mode="median")
            for leaf in leaves:
                leaf.grad = None
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            step()
            torch.cuda.synchronize()
            peak = (torch.cuda.max_memory_allocated() - before) / 2**20
            mask = "causal" if causal else "full"
            tflops = (f"{flops / fwd / 1e9:.0f}", f"{3.5 * flops / both / 1e9:.0f}")
            rows.append([f"{name} {mask}", f"{fwd:.3f}", tflops[0], f"{both:.3f}", tflops[1], f"{peak:.0f}"])
    report.text(f"## Speed (b{b} s{s} h{h} kv{kv} d{d} bf16; median of do_bench; blocks autotuned)\n")
    report.table(
        ["kernel", "fwd ms", "fwd TFLOP/s", "fwd+bwd ms", "fwd+bwd TFLOP/s", "fwd+bwd peak MiB (over inputs)"], rows
    )


def training(fa, report: Report, device: str, cpu: bool, batch: int = 8) -> None:
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

    def triton_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
        """transformers' attention interface: (b, h, s, d) in, (b, s, h, d) out; the build's flash_attn_func."""
        if attention_mask is not None:
            raise ValueError("this demo's attention takes no padding mask")
        causal = bool(module.is_causal if is_causal is None else is_causal)
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
        return fa.flash_attn_func(q, k, v, dropout_p=dropout, softmax_scale=scaling, causal=causal), None

    AttentionInterface.register("kernlock_triton", triton_attention)
    names = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    names += ("num_key_value_heads", "head_dim")
    if cpu:
        size = dict(zip(names, (128, 64, 128, 2, 4, 2, 16), strict=True))
        batch, seq, dtype = min(batch, 2), 32, torch.float32
    else:
        size = dict(zip(names, (32000, 4096, 12288, 8, 32, 8, 128), strict=True))
        seq, dtype = 2048, torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**size, max_position_embeddings=seq)).to(dtype)
    model.train()
    ids = torch.randint(0, size["vocab_size"], (batch, seq), device=device)
    losses = {}
    with torch.no_grad():
        for impl in ("sdpa", "kernlock_triton"):
            model.set_attn_implementation(impl)
            losses[impl] = float(model(input_ids=ids, labels=ids).loss)
    rows, results = [], {}
    for impl in ("sdpa", "kernlock_triton"):
        model.set_attn_implementation(impl)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=not cpu)
        calls = fa.CALL_COUNTS.get("flash_attn_func", 0)
        times = []
        if not cpu:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        for _ in range(2 + 5 if not cpu else 2):
            _sync(cpu)
            start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(cpu)
            times.append(time.perf_counter() - start)
        peak = 0.0 if cpu else torch.cuda.max_memory_allocated() / 2**30
        step = statistics.median(times[2:] or times)
        results[impl] = (step, peak)
        rows.append(
            [
                impl,
                f"{step * 1e3:.1f}",
                f"{peak:.2f}",
                f"{batch * seq / step:.0f}",
                str(fa.CALL_COUNTS.get("flash_attn_func", 0) - calls),
            ]
        )
        del optimizer
    (t_s, m_s), (t_t, m_t) = results["sdpa"], results["kernlock_triton"]
    report.text(
        f"## Training step (Llama-style, {size['num_hidden_layers']} layers, hidden {size['hidden_size']}, "
        f"{size['num_attention_heads']}/{size['num_key_value_heads']} heads, d{size['head_dim']}, "
        f"batch {batch} x {seq}, {str(dtype).removeprefix('torch.')}, AdamW; median of 5 after 2)\n"
    )
    report.table(["attention", "step ms", "peak GiB", "tokens/s", "build flash_attn_func calls"], rows)
    report.text(
        f"Loss at the same weights: sdpa {losses['sdpa']:.5f}, Triton {losses['kernlock_triton']:.5f}. "
        f"Triton/sdpa: step {t_t / t_s:.3f}x (goal <= 1.3x), peak memory "
        f"{(m_t / m_s if m_s else 0):.3f}x (goal <= 1.1x).\n"
    )


def _sync(cpu: bool) -> None:
    if not cpu:
        torch.cuda.synchronize()


def _tuned(fa) -> str:
    """The blocks the autotuner chose, per kernel and key."""
    impl = fa._impl
    bwd = sys.modules[impl.__name__ + "_bwd"]
    found = []
    for name, tuner in (("fwd", impl._FWD_TUNED), ("dkdv", bwd._DKDV_TUNED), ("dq", bwd._DQ_TUNED)):
        found += [f"{name} {key[:3]}: {config}" for key, config in tuner.cache.items()]
    return "\n".join(f"- {line}" for line in found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cpu", action="store_true", help="dry run with Triton's interpreter")
    parser.add_argument("--skip-training", action="store_true")
    args = parser.parse_args()
    from build_triton_kernel import build_variant

    device = "cpu" if args.cpu else "cuda"
    report = Report()
    out = args.out or Path(os.environ.get("OUT") or "triton-demo-out")
    ok = False
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ok = _run_all(report, args, device, build_variant, Path(tmp))
        finally:  # whatever ran is written, also when a part failed
            print(f"written: {report.write(out)}")
    return 0 if ok else 1


def _run_all(report: Report, args: argparse.Namespace, device: str, build_variant, tmp: Path) -> bool:
    """Every part in turn; whether every parity case passed."""
    variant = build_variant(tmp, version=2)
    fa = load_build(tmp / "build" / variant)
    gpu = "CPU (Triton interpreter)" if args.cpu else torch.cuda.get_device_name()
    report.text(
        f"{gpu}; torch {torch.__version__}, Triton {triton.__version__}; build {variant}, "
        f"identity {fa.KERNEL_IDENTITY}\n"
    )
    started = time.perf_counter()
    ok = parity(fa, report, device, args.cpu)
    report.text(
        f"Parity: {'all passed' if ok else 'FAILED'} ({time.perf_counter() - started:.0f} s, compiles included).\n"
    )
    if not args.cpu:
        os.environ["KERNLOCK_FA_AUTOTUNE"] = "1"
        started = time.perf_counter()
        errors, tuned_ok = parity_case(fa, torch.bfloat16, device, batch=8, sq=2048, heads=32, kv_heads=8, causal=True)
        ok &= tuned_ok
        report.text(
            f"Tuned blocks, bf16 b8 s2048 h32/kv8 d128 causal (Triton / sdpa error): out, dQ, dK, dV = "
            f"{', '.join(f'{o:.1e} / {t:.1e}' for o, t in errors)}: {'PASS' if tuned_ok else 'FAIL'} "
            f"(autotune {time.perf_counter() - started:.0f} s)\n"
        )
        speed(fa, report)
        report.text("Autotuned blocks:\n" + _tuned(fa) + "\n")
    if not args.skip_training:
        for batch in (8, 4):
            try:
                training(fa, report, device, args.cpu, batch)
                break
            except torch.OutOfMemoryError as err:
                report.text(f"Training step at batch {batch}: out of memory ({str(err).splitlines()[0]})\n")
                torch.cuda.empty_cache()
    report.text(f"CALL_COUNTS of the build: {fa.CALL_COUNTS}\n")
    return ok


if __name__ == "__main__":
    sys.exit(main())
