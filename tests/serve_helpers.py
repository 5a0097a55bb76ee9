"""Start `llmchat serve` as a subprocess on a free loopback port, and a tiny model folder to serve fast.

The tiny model is an ordinary Hugging Face folder (config.json, safetensors, the default model's real
tokenizer files) with small random weights: the server loads it through the same path as any --model
folder, so nothing in the server knows it is a test.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "max_position_embeddings": 1024, "tie_word_embeddings": False, "eos_token_id": 2, "bos_token_id": 1,
}


def write_tiny_model(folder: Path, tokenizer_dir: Path, seed: int = 0) -> Path:
    import torch
    from safetensors.torch import save_file

    from llmchat.core.weights.checkpoint import expected_tensor_shapes
    from llmchat.core.config import ModelConfig

    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, folder / name)
    vocab = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    config = {**TINY_CONFIG, "vocab_size": vocab}
    (folder / "config.json").write_text(json.dumps(config))
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in expected_tensor_shapes(ModelConfig.from_hf_dict(config)).items():
        tensors[name] = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=gen) * 0.5
    save_file(tensors, folder / "model.safetensors")
    return folder


def llmchat_exe() -> str:
    found = shutil.which("llmchat", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert found, "the `llmchat` command is not installed (pip install -e .)"
    return found


class Server:
    """`llmchat serve ARGS --port 0` in its own process; .url is its /v1 base once it answers /health."""

    def __init__(self, *args: str, timeout: float = 120.0) -> None:
        self.proc = subprocess.Popen([llmchat_exe(), "serve", "--port", "0", *args], stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True)
        self.log: list[str] = []
        deadline = time.monotonic() + timeout
        for line in self.proc.stderr:  # the address is printed once the model is loaded and the port bound
            self.log.append(line)
            match = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
            if match:
                self.root = match.group(1)
                break
            assert time.monotonic() < deadline, "".join(self.log)
        else:
            raise AssertionError(f"llmchat serve exited ({self.proc.wait()}):\n{''.join(self.log)}")
        self.url = self.root + "/v1"
        threading.Thread(target=self.log.extend, args=(self.proc.stderr,), daemon=True).start()  # never let it block
        while httpx.get(self.root + "/health").status_code != 200:
            time.sleep(0.1)

    def metrics(self) -> dict[str, float]:
        """The /metrics samples, the model_name label left out (one model per server)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.root + "/metrics").text
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out

    def wait_metric(self, name: str, predicate, timeout: float = 20.0) -> float:
        deadline = time.monotonic() + timeout
        while True:
            value = self.metrics().get(name, 0.0)
            if predicate(value):
                return value
            assert time.monotonic() < deadline, f"{name} stayed at {value}"
            time.sleep(0.1)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """Ctrl+C, as a user stops it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


class ScriptedEngine:
    """What OpenAIServer needs of a ServedEngine, answering every chat with the same scripted text deltas (to
    test what the server makes of them, e.g. <think> tags split across deltas, without a model that writes them)."""

    def __init__(self, deltas: list[str], reasoning_open: bool = False) -> None:
        from llmchat.core.api.protocol import BackendInfo

        self.deltas, self.reasoning_open = deltas, reasoning_open
        self.info = BackendInfo("scripted", 4096, "nowhere", "none", None)
        self.alive = True
        self.metrics = None  # (only /metrics reads it)
        self.submitted: list[list[dict]] = []  # the messages of each chat request, as the server parsed them

    def submit_chat(self, messages, params):
        import asyncio

        from llmchat.core.api.events import Finished, FinishReason, Started, TextDelta
        from llmchat.core.api.metrics import RequestMetrics

        self.submitted.append(messages)
        queue: asyncio.Queue = asyncio.Queue()
        queue.put_nowait(Started(1, (1, 2, 3), 0, reasoning_open=self.reasoning_open))
        for i, text in enumerate(self.deltas):
            queue.put_nowait(TextDelta(1, text, (100 + i,)))
        metrics = RequestMetrics(3, 0, len(self.deltas), 0.0, 0.01, 0.01)
        queue.put_nowait(Finished(1, FinishReason.STOP, metrics, tuple(range(len(self.deltas))), "".join(self.deltas)))
        return queue

    async def next_event(self, stream):
        return await stream.get()

    def cancel(self, stream) -> None:
        pass


class ThreadServer:
    """An OpenAIServer on a ScriptedEngine, served by uvicorn on a free loopback port in this process; .url is
    its /v1 base."""

    def __init__(self, engine: ScriptedEngine) -> None:
        import socket

        import uvicorn

        from llmchat.core.serve.server import OpenAIServer

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(OpenAIServer(engine).app, host="127.0.0.1", port=port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
