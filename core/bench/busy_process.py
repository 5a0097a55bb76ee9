"""Another program keeping one CPU busy, for `llmchat bench shared-cpu`: a Python spin loop in a child.

It is always ended: `busy_process()` kills and reaps it when the block exits, normally, on an exception or
on Ctrl+C; and the child checks every few milliseconds that its parent is still the process that started
it, so it ends by itself when the benchmark is killed outright (SIGKILL runs no `finally`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# spins while the parent lives; os.getppid() changes when the parent dies (the child is reparented)
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(20000): pass\n"


@contextmanager
def busy_process() -> Iterator[subprocess.Popen]:
    """A child process spinning on one CPU for as long as the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
