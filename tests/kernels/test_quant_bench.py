"""kernels/quant_bench.py at its tiny size: the synthetic Q4_K_M layer is what a Q4_K_M file holds, and every path
is timed on it."""
from __future__ import annotations

import json

from llmchat.kernels import quant_bench
from llmchat.kernels.quant_blocks import dequantize_ref


def test_synthetic_layer_is_a_llama_1b_q4_k_m_layer():
    weights = quant_bench.synthetic_weights("llama-1b-q4km")
    shapes = [(w.qtype, w.out_features, w.in_features) for w in weights]
    # q (32 heads of 64) + k, v (8 heads each), o, gate + up (FFN 8192), down: Q6_K as Q4_K_M keeps it
    assert shapes == [("Q4_K", 2048 + 2 * 512, 2048), ("Q4_K", 2048, 2048), ("Q4_K", 2 * 8192, 2048),
                      ("Q6_K", 2048, 8192)]
    w = dequantize_ref(weights[3])
    bound = 0.02 * 128 * 32  # d < 0.02, |scale| <= 128, |q - 32| <= 32
    assert bool(w.isfinite().all()) and 0 < float(w.abs().max()) <= bound


def test_bench_times_every_path_on_the_synthetic_layer(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(quant_bench.SYNTHETIC, "tiny", (("Q4_K", 256, 512), ("Q6_K", 64, 256)))
    out = tmp_path / "bench.json"
    quant_bench.main(["--synthetic", "tiny", "--rows", "1,5", "--iters", "1", "--json", str(out)])
    rows = json.loads(out.read_text())
    paths = {"fp32-packed", "int8-dot", "int8-rowwise", "dequant-gemm"}
    if quant_bench.cpu_has_native_bf16():
        paths.add("dequant-gemm-bf16")
    assert {(r["rows"], r["path"]) for r in rows} == {(n, p) for n in (1, 5) for p in paths}
    assert all(r["ms"] > 0 and r["group"] == "layers" for r in rows)
    q_mb, fp32_mb = round((256 * 2 * 144 + 64 * 210) / 1e6, 1), round((256 * 512 + 64 * 256) * 4 / 1e6, 1)
    assert {r["weight_mb"] for r in rows if r["path"] != "fp32-packed"} == {q_mb}  # the file's bytes: 0.1 MB
    assert {r["weight_mb"] for r in rows if r["path"] == "fp32-packed"} == {fp32_mb}
    assert "int8-rowwise" in capsys.readouterr().out
