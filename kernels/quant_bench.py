"""Time the quantized CPU linear on a GGUF file's own weights, against today's fp32 path (oneDNN-prepacked).

    python -m llmchat.kernels.quant_bench FILE.gguf [--rows 1,4,16] [--iters 15] [--json PATH]
    python -m llmchat.kernels.quant_bench --synthetic llama-1b-q4km [--rows ...]   (no file: one layer)

Every quantized 2-D tensor of the file is one linear (for the default model: 210 projections, and the tied
Q8_0 embedding as the output head, timed apart). Per row count, one pass runs every linear once; the paths are
interleaved pass by pass and the median pass is reported, with the weight bytes each path reads and the
bandwidth that implies. Paths: `fp32-packed` (kernels/linear.py, the weights dequantized at load), `int8-dot`
(the C++ kernel on the quantized bytes: 512-bit tiles of weight rows where the build and type have them),
`int8-rowwise` (the same kernel's row-by-row loop, the same bits: what the tiles gain), `dequant-gemm`
(dequantize in C++ into one scratch buffer, then a oneDNN GEMM: the many-rows path), `dequant-gemm-bf16` (the
same in bf16, LLMCHAT_QUANT_GEMM=bfloat16; only on CPUs with native bf16 dot products). `--synthetic
llama-1b-q4km` times one Llama-3.2-1B-shape layer as a Q4_K_M file holds it (random blocks: the time does not
depend on the values).
Run it alone on the machine (`flock -x`), and compare ratios from one run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .linear import cpu_has_native_bf16, linear, prepack_linear_weight
from .quant_blocks import BLOCK_LAYOUTS, QuantWeight, dequantize_ref
from .quant_cpu_build import load_cpu_kernels
from .quant_linear import gemm, qtype_number


@dataclass(slots=True)
class Row:
    group: str  # "layers" or "head"
    rows: int
    path: str
    ms: float
    weight_mb: float
    gb_per_s: float


def read_weights(path: Path) -> tuple[list[QuantWeight], QuantWeight | None]:
    """The file's quantized 2-D tensors as stored: (the layers' linears, the output head or tied embedding)."""
    from gguf import GGUFReader

    reader = GGUFReader(path)
    layers, head = [], None
    for t in reader.tensors:
        if t.tensor_type.name not in BLOCK_LAYOUTS or len(t.shape) != 2:
            continue
        out_features, in_features = int(t.shape[1]), int(t.shape[0])
        w = QuantWeight(t.tensor_type.name, torch.from_numpy(t.data.copy()), out_features, in_features)
        if t.name in ("output.weight", "token_embd.weight"):
            head = w if head is None or t.name == "output.weight" else head
        else:
            layers.append(w)
    return layers, head


# (block type, out_features, in_features) of one Llama-3.2-1B-shape layer (hidden 2048, FFN 8192, 32 query / 8 KV
# heads of 64) in a Q4_K_M file: q/k/v fused, o and gate/up fused in Q4_K, down in Q6_K
SYNTHETIC = {"llama-1b-q4km": (("Q4_K", 3072, 2048), ("Q4_K", 2048, 2048), ("Q4_K", 16384, 2048),
                               ("Q6_K", 2048, 8192))}
F16_AT = {"Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's fp16 scales


def synthetic_weights(name: str, seed: int = 0) -> list[QuantWeight]:
    """Random blocks of the shapes and types in SYNTHETIC[name], every fp16 scale a small finite value."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for qtype, out_features, in_features in SYNTHETIC[name]:
        block_weights, block_bytes = BLOCK_LAYOUTS[qtype]
        blocks = torch.randint(0, 256, (out_features * in_features // block_weights, block_bytes), generator=gen,
                               dtype=torch.uint8)
        for at in F16_AT[qtype]:
            blocks[:, at : at + 2] = (torch.rand(blocks.shape[0], 1, generator=gen) * 0.02).half().view(torch.uint8)
        out.append(QuantWeight(qtype, blocks.reshape(out_features, -1), out_features, in_features))
    return out


def _pass_fns(weights: list[QuantWeight], rows: int, ext) -> dict[str, tuple[object, float]]:
    x = {w.in_features: torch.randn(rows, w.in_features) for w in weights}
    packed = [prepack_linear_weight(dequantize_ref(w)) for w in weights]
    plain = [dequantize_ref(w) if p is None else None for w, p in zip(weights, packed)]
    fp32_bytes = sum(4 * w.out_features * w.in_features for w in weights)
    q_bytes = sum(w.nbytes for w in weights)
    scratch = torch.empty(max(w.out_features * w.in_features for w in weights))  # one dequantized weight
    fns = {
        "fp32-packed": (lambda: [linear(x[w.in_features], pw, None, p)
                                 for w, p, pw in zip(weights, packed, plain)], fp32_bytes),
        "int8-dot": (lambda: [ext.quant_linear(x[w.in_features], w.data, qtype_number(w.qtype), w.out_features,
                                               w.in_features) for w in weights], q_bytes),
        "int8-rowwise": (lambda: [ext.quant_linear(x[w.in_features], w.data, qtype_number(w.qtype),
                                                   w.out_features, w.in_features, tiles=False)
                                  for w in weights], q_bytes),
        "dequant-gemm": (lambda: [gemm(x[w.in_features], ext.dequantize(w.data, qtype_number(w.qtype),
                                                                            w.out_features, w.in_features,
                                                                            None, scratch))
                                  for w in weights], q_bytes),
    }
    if cpu_has_native_bf16():
        low = torch.empty(scratch.numel(), dtype=torch.bfloat16)
        xb = {k: v.bfloat16() for k, v in x.items()}

        def gemm_bf16(w: QuantWeight) -> torch.Tensor:
            fp32 = ext.dequantize(w.data, qtype_number(w.qtype), w.out_features, w.in_features, None, scratch)
            return gemm(xb[w.in_features], low[: fp32.numel()].view_as(fp32).copy_(fp32))

        fns["dequant-gemm-bf16"] = (lambda: [gemm_bf16(w) for w in weights], q_bytes)
    return fns


def bench(path: Path | str, row_counts: list[int], iters: int, build_dir: str) -> list[Row]:
    """`path`: a GGUF file, or the name of a SYNTHETIC layer."""
    kernels = load_cpu_kernels(build_dir)
    if kernels.module is None:
        raise SystemExit(kernels.note)
    print(kernels.note, f"| torch threads {torch.get_num_threads()}")
    layers, head = (synthetic_weights(path), None) if path in SYNTHETIC else read_weights(Path(path))
    groups = {"layers": layers, **({"head": [head]} if head is not None else {})}
    out = []
    for group, weights in groups.items():
        for rows in row_counts:
            fns = _pass_fns(weights, rows, kernels.module)
            samples: dict[str, list[float]] = {name: [] for name in fns}
            for i in range(iters + 2):
                for name, (fn, _) in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    if i >= 2:  # two warm-up passes
                        samples[name].append((time.perf_counter() - t0) * 1e3)
            for name, (_, num_bytes) in fns.items():
                ms = statistics.median(samples[name])
                out.append(Row(group, rows, name, round(ms, 3), round(num_bytes / 1e6, 1),
                               round(num_bytes / (ms * 1e6), 1)))
    return out


def main(argv: list[str] | None = None) -> None:
    import platformdirs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path, nargs="?")
    parser.add_argument("--synthetic", choices=sorted(SYNTHETIC), help="time this layer instead of a file's")
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--build-dir", default=str(Path(platformdirs.user_cache_dir("llmchat")) / "kernels"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if (args.gguf is None) == (args.synthetic is None):
        parser.error("give a GGUF file or --synthetic NAME")
    rows = bench(args.synthetic or args.gguf, [int(r) for r in args.rows.split(",")], args.iters, args.build_dir)
    print(f"{'group':7} {'rows':>4} {'path':17} {'ms':>9} {'weight MB':>10} {'GB/s':>7}")
    for r in rows:
        print(f"{r.group:7} {r.rows:>4} {r.path:17} {r.ms:>9.2f} {r.weight_mb:>10.1f} {r.gb_per_s:>7.1f}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))


if __name__ == "__main__":
    main()
