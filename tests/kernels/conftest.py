"""Kernel tests: each Triton kernel against its torch reference, each reference against an independent oracle.

Without CUDA, Triton runs on CPU tensors in its interpreter, which must be chosen before `triton` is
first imported (its standard library is decorated at import). This conftest sets TRITON_INTERPRET=1
for a run of tests/kernels alone; a full run needs the same two lines in tests/conftest.py, because
earlier test modules may import triton (transformers and torch._dynamo do). With CUDA the kernels run
natively on the GPU and TRITON_INTERPRET is left alone.
"""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from llmchat.kernels.triton_support import HAS_TRITON, interpreting  # noqa: E402  (after the env var)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="session")
def device() -> torch.device:
    return DEVICE


@pytest.fixture
def triton_device(device: torch.device) -> torch.device:
    """The device to run Triton kernels on; fails (not skips) when Triton cannot run here."""
    if not HAS_TRITON:
        pytest.skip("the triton package is not installed on this platform")
    if device.type == "cpu" and not interpreting():
        pytest.fail("triton was imported before TRITON_INTERPRET=1 was set: set it in tests/conftest.py")
    return device
