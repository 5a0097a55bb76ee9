"""`llmchat bench` keeps working: a tiny run on the real default model, table and JSON lines checked."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # `llmchat bench` on the real model, in a subprocess
def test_bench_quick_writes_named_measurements(default_model_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "chat", "concurrent", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["scenario"] for r in rows} == {"chat", "concurrent"}, "only the named scenarios run"
    chat = [r for r in rows if r["scenario"] == "chat"]
    assert {r["variant"] for r in chat} == {"cache-on", "cache-off"}
    assert sorted({r["turn"] for r in chat}) == [1, 2, 3]
    assert all(r["metric"] == "ttft" and r["unit"] == "ms" and r["value"] > 0 for r in chat)
    concurrent = {(r["variant"], r["metric"]) for r in rows if r["scenario"] == "concurrent"}
    assert ("chats=2", "aggregate_tokens_per_s") in concurrent and ("chats=1", "tpot") in concurrent
    assert "aggregate_tokens_per_s" in result.stdout  # the table


def test_bench_rejects_unknown_scenario():
    result = subprocess.run([sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "nope"], capture_output=True, text=True)
    assert result.returncode == 2 and "unknown scenario" in result.stderr


@pytest.mark.slow  # `llmchat bench` on the real model, in a subprocess
def test_bench_decode_reports_bandwidth_and_memory_reports_rss(default_model_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "decode", "memory", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    assert "cpu: " in result.stderr
    rows = {(r["scenario"], r["variant"], r["metric"]): r for r in map(json.loads, out.read_text().splitlines())}
    weight = rows[("decode", "context=40", "weight_bytes_per_token")]
    # the default GGUF read as stored: 210 Q4_1 projections + the Q8_0 tied head, ~97 MB (fp32: ~540 MB)
    assert "weights gguf:Q4_1+Q8_0" in result.stderr
    assert weight["unit"] == "MB" and 85 < weight["value"] < 110
    tpot = rows[("decode", "context=40", "tpot")]["value"]
    bandwidth = rows[("decode", "context=40", "achieved_bandwidth")]["value"]
    kv = rows[("decode", "context=40", "kv_bytes_per_token")]["value"]
    assert abs(bandwidth - (weight["value"] + kv) / tpot) <= 0.05 * bandwidth  # GB/s = MB / ms
    for kind in ("ask", "app-engine"):
        rss = rows[("memory", kind, "max_rss")]
        assert rss["unit"] == "MB" and 200 < rss["value"] < 4000


@pytest.mark.slow  # `llmchat bench` on the real model, in a subprocess
def test_bench_speculative_names_its_variants_and_metrics(default_model_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "speculative", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    rows = {(r["variant"], r["metric"]): r["value"] for r in map(json.loads, out.read_text().splitlines())}
    for prefix in ("", "code-", "edit-", "plain-"):
        assert rows[(prefix + "on", "tpot")] > 0 and rows[(prefix + "off", "tpot")] > 0
        assert 0 <= rows[(prefix + "on", "acceptance")] <= 1 and rows[(prefix + "on", "identical")] == 1
    assert rows[("on", "acceptance")] > 0.5, "the model repeats the text it was given: most drafts are kept"
    assert ("off", "acceptance") not in rows


@pytest.mark.slow  # `llmchat bench` on the real model, in a subprocess
def test_bench_typeahead_compares_ttft_on_and_off(default_model_dir, tmp_path):
    out = tmp_path / "bench.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "llmchat.tui.commands.cli", "bench", "typeahead", "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    rows = {(r["variant"], r["metric"]): r["value"] for r in map(json.loads, out.read_text().splitlines())}
    assert rows[("typeahead=on", "ttft")] > 0 and rows[("typeahead=off", "ttft")] > 0
    assert rows[("other chat streaming, no typing", "tpot")] > 0
    assert rows[("other chat streaming, typing, typeahead on", "tpot")] > 0
    # the typed message's blocks were computed while it was typed: Enter reused all but the last partial block
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("typeahead on: reused")]
    reused, prompt = (int(x) for x in re.match(r"typeahead on: reused (\d+) of (\d+)", lines[0]).groups())
    assert reused == (prompt - 1) // 16 * 16
