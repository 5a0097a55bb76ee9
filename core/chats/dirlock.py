"""One app owns a data dir at a time: an exclusive flock on its lock file, which holds the owner's pid."""
from __future__ import annotations

import os
from pathlib import Path

LOCK_NAME = "llmchat.lock"


class DataDirInUse(RuntimeError):
    """Another llmchat has this data dir open."""


def lock_data_dir(data_dir: Path) -> int | None:
    """Take the data dir (the lock goes with the returned descriptor when it is closed); None where there is no
    flock (Windows: WAL keeps writes safe; two apps may still interleave). DataDirInUse: another app has it."""
    try:
        import fcntl
    except ImportError:
        return None
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # (a lock file from an older llmchat was 0644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise DataDirInUse(f"{data_dir} is in use by another llmchat (pid {holder}); "
                           "close that one, or start this one with --data-dir OTHER_DIR") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd
