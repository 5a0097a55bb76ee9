"""kernels/bench.py at its tiny size (what CI runs): every op and head shape timed, SDPA agreeing with the refs."""
from __future__ import annotations

import json

import torch

from llmchat.kernels import bench

from kernel_testing import tolerance


def test_bench_tiny_writes_every_row(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["copy_gb_per_s"] > 0
    rows = report["rows"]
    ops = {"decode attention", "prefill attention", "store_kv", "rms_norm+residual", "rope"}
    for model in bench.HEAD_SHAPES:
        assert {r["op"] for r in rows if r["model"] == model} == ops
    assert all(r["ms"] > 0 for r in rows)
    sdpa = [r for r in rows if r["impl"].startswith("sdpa")]
    bound = tolerance(getattr(torch, report["dtype"]))  # fp32 on CPU; bf16 on CUDA (checked on an H200)
    assert len(sdpa) == 2 * len(bench.HEAD_SHAPES) and all(r["max_err"] < bound for r in sdpa)
    assert all(r["copy_fraction"] > 0 for r in rows if r["op"] == "decode attention")
    printed = capsys.readouterr().out
    assert "copy bandwidth" in printed and "decode attention" in printed
