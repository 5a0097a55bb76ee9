"""Time each Triton kernel against its torch reference and PyTorch's scaled_dot_product_attention.

    python -m llmchat.kernels.bench [--tiny] [--json PATH]

On CUDA: serving sizes (64 sequences x 2048 context for decode; 4 x 2048-token prompts for prefill) for
SmolLM2-135M heads (9 q / 3 kv / 64) and Llama-3-8B heads (32 q / 8 kv / 128), bf16, block size 16,
block tables shuffled. Decode attention reports the bandwidth it achieves reading K/V, as a fraction of
the device's copy bandwidth measured in the same run (a large tensor copy: read + write bytes / time).
Every Triton result is checked against the reference first ("max err" column).

Without CUDA the Triton kernels only run in the interpreter, whose timings mean nothing: the bench then
says so and times the torch references and SDPA at a tiny size, which keeps this script working in CI.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from . import paged_decode_attention as decode_mod
from . import paged_prefill_attention as prefill_mod
from . import rms_norm as rms_norm_mod
from . import rope as rope_mod
from . import store_kv as store_kv_mod

HEAD_SHAPES = {"SmolLM2-135M": (9, 3, 64, 576), "Llama-3-8B": (32, 8, 128, 4096)}  # q heads, kv heads, dim, hidden


@dataclass(slots=True)
class Row:
    op: str
    model: str
    shape: str
    impl: str
    ms: float
    gb_per_s: float | None = None
    tflop_per_s: float | None = None
    copy_fraction: float | None = None
    max_err: float | None = None


def time_ms(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    """Median milliseconds of fn() after warm-up (CUDA events on GPU, perf_counter on CPU)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def copy_bandwidth(device: torch.device, num_bytes: int, iters: int) -> float:
    """GB/s of dst.copy_(src) counting bytes read plus bytes written."""
    src = torch.empty(num_bytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    return 2 * num_bytes / (time_ms(lambda: dst.copy_(src), device, iters) * 1e6)


def max_rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _paged(num_seqs: int, context: int, num_kv_heads: int, head_dim: int, block_size: int, dtype, device):
    """Random K/V caches holding num_seqs full contexts in shuffled blocks, and their block tables."""
    blocks_per_seq = -(-context // block_size)
    num_blocks = num_seqs * blocks_per_seq
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(shape, dtype=dtype, device=device)
    v_cache = torch.randn(shape, dtype=dtype, device=device)
    tables = torch.randperm(num_blocks, device=device).view(num_seqs, blocks_per_seq).int()
    return k_cache, v_cache, tables


def _dense(cache: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """[num_seqs, num_kv_heads, context, head_dim] contiguous: what SDPA gets, gathered ahead of time."""
    num_seqs = tables.shape[0]
    x = cache[tables.long()].flatten(1, 2)[:, :context]  # [num_seqs, context, kv_heads, dim]
    return x.transpose(1, 2).contiguous()


def _sdpa(q, k, v, group: int, causal: bool) -> Callable[[], torch.Tensor]:
    """SDPA with GQA: native where torch has it (>= 2.5), else K/V expanded outside of the timed call."""
    try:
        F.scaled_dot_product_attention(q[:1], k[:1], v[:1], is_causal=causal, enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:  # torch < 2.5
        ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)


def bench_decode(model, heads, num_seqs, context, dtype, device, triton_ok, copy_gbs, iters) -> list[Row]:
    num_q_heads, num_kv_heads, head_dim, _ = heads
    k_cache, v_cache, tables = _paged(num_seqs, context, num_kv_heads, head_dim, 16, dtype, device)
    seq_lens = torch.full((num_seqs,), context, dtype=torch.int32, device=device)
    q = torch.randn(num_seqs, num_q_heads, head_dim, dtype=dtype, device=device)
    scale = head_dim**-0.5
    args = (q, k_cache, v_cache, tables, seq_lens, scale)
    kv_bytes = 2 * num_seqs * context * num_kv_heads * head_dim * k_cache.element_size()
    shape = f"{num_seqs}x{context} {num_q_heads}/{num_kv_heads}/{head_dim}"
    ref = decode_mod.paged_decode_attention_ref(*args)
    kd, vd = _dense(k_cache, tables, context), _dense(v_cache, tables, context)
    impls = {"torch ref": lambda: decode_mod.paged_decode_attention_ref(*args),
             "sdpa (dense K/V)": _sdpa(q.unsqueeze(2), kd, vd, num_q_heads // num_kv_heads, causal=False)}
    errs = {}
    if triton_ok:
        impls = {"triton": lambda: decode_mod.paged_decode_attention(*args), **impls}
        errs["triton"] = max_rel_err(impls["triton"](), ref)
    errs["sdpa (dense K/V)"] = max_rel_err(impls["sdpa (dense K/V)"]().squeeze(2), ref)
    rows = []
    for name, fn in impls.items():
        ms = time_ms(fn, device, iters)
        gbs = kv_bytes / (ms * 1e6)
        rows.append(Row("decode attention", model, shape, name, ms, gbs, None, gbs / copy_gbs, errs.get(name)))
    return rows


def bench_prefill(model, heads, num_seqs, prompt_len, dtype, device, triton_ok, iters) -> list[Row]:
    num_q_heads, num_kv_heads, head_dim, _ = heads
    k_cache, v_cache, tables = _paged(num_seqs, prompt_len, num_kv_heads, head_dim, 16, dtype, device)
    seq_lens = torch.full((num_seqs,), prompt_len, dtype=torch.int32, device=device)
    cu = torch.arange(0, num_seqs + 1, dtype=torch.int32, device=device) * prompt_len
    q = torch.randn(num_seqs * prompt_len, num_q_heads, head_dim, dtype=dtype, device=device)
    args = (q, k_cache, v_cache, tables, cu, seq_lens, head_dim**-0.5)
    flops = num_seqs * 4 * num_q_heads * head_dim * prompt_len * (prompt_len + 1) / 2  # causal QK^T and PV
    shape = f"{num_seqs}x{prompt_len} {num_q_heads}/{num_kv_heads}/{head_dim}"
    chunk = {"max_score_bytes": 1 << 30} if device.type == "cuda" else {}  # GPU: one chunk per sequence
    ref = prefill_mod.paged_prefill_attention_ref(*args, **chunk)
    qd = q.view(num_seqs, prompt_len, num_q_heads, head_dim).transpose(1, 2)
    kd, vd = _dense(k_cache, tables, prompt_len), _dense(v_cache, tables, prompt_len)
    sdpa = _sdpa(qd, kd, vd, num_q_heads // num_kv_heads, causal=True)
    impls = {"torch ref": lambda: prefill_mod.paged_prefill_attention_ref(*args, **chunk), "sdpa (dense K/V)": sdpa}
    errs = {"sdpa (dense K/V)": max_rel_err(sdpa().transpose(1, 2).reshape(q.shape), ref)}
    if triton_ok:
        max_q = prompt_len
        impls = {"triton": lambda: prefill_mod.paged_prefill_attention(*args, max_q_len=max_q), **impls}
        errs["triton"] = max_rel_err(impls["triton"](), ref)
    rows = []
    for name, fn in impls.items():
        ms = time_ms(fn, device, iters)
        rows.append(Row("prefill attention", model, shape, name, ms, None, flops / (ms * 1e9), None, errs.get(name)))
    return rows


def bench_pointwise(model, heads, num_tokens, dtype, device, triton_ok, iters) -> list[Row]:
    """store_kv, rms_norm (with residual) and rope on one prefill chunk of num_tokens."""
    num_q_heads, num_kv_heads, head_dim, hidden = heads
    rows = []
    k = torch.randn(num_tokens, num_kv_heads, head_dim, dtype=dtype, device=device)
    v = torch.randn_like(k)
    k_cache, v_cache, _ = _paged(1, num_tokens, num_kv_heads, head_dim, 16, dtype, device)
    slots = torch.randperm(num_tokens, device=device)
    x, res = (torch.randn(num_tokens, hidden, dtype=dtype, device=device) for _ in range(2))
    w = torch.randn(hidden, dtype=dtype, device=device)
    q = torch.randn(num_tokens, num_q_heads, head_dim, dtype=dtype, device=device)
    cos_sin = rope_mod.rope_cos_sin_cache(head_dim, 8192, 10000.0).to(device)
    pos = torch.randint(0, 8192, (num_tokens,), device=device)
    el = k.element_size()
    returned = lambda fn: fn()  # noqa: E731  (the op's result is its return value)
    stored = lambda fn: (fn(), k_cache.clone())[1]  # noqa: E731  (store_kv's result is the cache; all slots written)
    cases = [  # op, bytes moved, triton, reference, how to get the result compared
        ("store_kv", 4 * k.numel() * el, lambda: store_kv_mod.store_kv(k, v, k_cache, v_cache, slots),
         lambda: store_kv_mod.store_kv_ref(k, v, k_cache, v_cache, slots), stored),
        ("rms_norm+residual", 4 * x.numel() * el, lambda: rms_norm_mod.rms_norm(x, w, 1e-5, res)[0],
         lambda: rms_norm_mod.rms_norm_ref(x, w, 1e-5, res)[0], returned),
        ("rope", 2 * (q.numel() + k.numel()) * el, lambda: rope_mod.rope(q, k, pos, cos_sin)[0],
         lambda: rope_mod.rope_ref(q, k, pos, cos_sin)[0], returned),
    ]
    rows = []
    for op, nbytes, tri, ref, result in cases:
        impls = {"triton": tri, "torch ref": ref} if triton_ok else {"torch ref": ref}
        err = max_rel_err(result(tri), result(ref)) if triton_ok else None
        for name, fn in impls.items():
            ms = time_ms(fn, device, iters)
            rows.append(Row(op, model, f"{num_tokens} tokens", name, ms, nbytes / (ms * 1e6), None, None,
                            err if name == "triton" else None))
    return rows


def print_table(rows: list[Row], copy_gbs: float, device_name: str) -> None:
    print(f"device: {device_name}; copy bandwidth {copy_gbs:.0f} GB/s (read + write, same run)")
    header = (f"{'op':<18} {'model':<13} {'shape':<22} {'impl':<17} {'ms':>9} {'GB/s':>7} {'TFLOP/s':>8} "
              f"{'of copy':>8} {'max err':>8}")
    print(header)
    print("-" * len(header))
    for r in rows:
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        print(f"{r.op:<18} {r.model:<13} {r.shape:<22} {r.impl:<17} {r.ms:>9.3f} {fmt(r.gb_per_s, '>7.0f')} "
              f"{fmt(r.tflop_per_s, '>8.1f')} {fmt(r.copy_fraction, '>8.0%')} {fmt(r.max_err, '>8.1e')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmchat.kernels.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (what CI runs); implied without CUDA")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    opts = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    tiny = opts.tiny or not cuda
    if not cuda:
        print("No CUDA device: the Triton kernels run only in Triton's CPU interpreter here, whose timings mean "
              "nothing. Timing the torch references and SDPA at a tiny size instead (use a GPU for the real table).")
    dtype = torch.bfloat16 if cuda else torch.float32
    num_seqs, context, prompt, num_tokens, iters = (4, 64, 64, 64, 3) if tiny else (64, 2048, 2048, 8192, 20)
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth(device, (64 << 20) if tiny else (2 << 30), iters)
    rows: list[Row] = []
    for model, heads in HEAD_SHAPES.items():
        rows += bench_decode(model, heads, num_seqs, context, dtype, device, cuda, copy_gbs, iters)
        rows += bench_prefill(model, heads, 4, prompt, dtype, device, cuda, iters)
        rows += bench_pointwise(model, heads, num_tokens, dtype, device, cuda, iters)
    print_table(rows, copy_gbs, torch.cuda.get_device_name(device) if cuda else "cpu")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"copy_gb_per_s": copy_gbs, "dtype": str(dtype).removeprefix("torch."), "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
