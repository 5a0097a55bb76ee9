"""Whether a process id names a running process (stale temporary files are told apart by the pid in their name)."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (one of another user's counts); False for no such process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # another user's process, or no valid pid at all
        return pid > 0
    return True
