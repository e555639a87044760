"""The local runtime's data directory: private to its user, and used by one runtime at a time.

The directory holds every table, log entry, snapshot and data file of the embedded default, so it is created
0700 (an existing one is narrowed to 0700) and the runtime creates its files 0600.

``DIR/.lock`` is held (``flock``) by the runtime *and by every process it starts on the directory*: the lock's
file descriptor is inherited by DynamoDB Local, so the lock is released only when the last of them has ended.
A runtime killed with ``kill -9`` leaves its DynamoDB Local to notice and exit (a moment later); a restart
meanwhile finds the lock held by a process whose owner is gone, and waits for it instead of failing or, as
without the inherited lock, starting a second DynamoDB Local on the same files.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
# How long a restart waits for the processes of a runtime that ended to let the directory go.
ORPHAN_WAIT_SECONDS = 30.0


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents 0700 (``Path.mkdir`` gives parents the default mode)."""
    missing = []
    for path in (directory, *directory.parents):
        if path.is_dir():
            break
        missing.append(path)
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass


def prepare(directory: Path) -> None:
    """Create ``directory`` 0700, or narrow an existing one to 0700."""
    make_private_dirs(directory)
    if directory.stat().st_mode & 0o077:
        directory.chmod(0o700)


class DataDirLock:
    """``DIR/.lock``, held while this object is open. Build with :meth:`acquire`."""

    def __init__(self, directory: Path, fd: int) -> None:
        """Use :meth:`acquire`."""
        self.directory = directory
        self.fd = fd

    @classmethod
    def acquire(cls, directory: Path, orphan_wait: float = ORPHAN_WAIT_SECONDS) -> DataDirLock:
        """Take the lock of ``directory`` (prepared as :func:`prepare` does); record this process's id in it.

        If another runtime that is still running holds it, raise ValueError at once. If the holder is a
        process left by a runtime that ended (the lock file names a process that no longer exists), wait up to
        ``orphan_wait`` seconds for it to end, then raise ValueError naming the lock file.
        """
        prepare(directory)
        path = directory / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + orphan_wait
        said = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError:
                    pass
                owner = _recorded_pid(fd)
                if owner is not None and _alive(owner):
                    raise ValueError(
                        f"the data directory {directory} is in use by another local runtime (process "
                        f"{owner}); stop it first, or give another --data-dir"
                    )
                if not said:
                    logger.warning(
                        "waiting up to %.0fs for the processes of a local runtime that ended (process %s) to "
                        "let %s go",
                        orphan_wait,
                        owner,
                        directory,
                    )
                    said = True
                if time.monotonic() > deadline:
                    raise ValueError(
                        f"the data directory {directory} is still held by a process of a local runtime "
                        f"that ended (process {owner}, recorded in {path}), after waiting "
                        f"{orphan_wait:.0f}s; find it with `fuser {path}` and stop it"
                    )
                time.sleep(0.1)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(directory, fd)

    def release(self) -> None:
        """Close this process's descriptor (the lock ends when the processes that inherited it end too).
        Safe to call more than once."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _recorded_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (ValueError, OSError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an ended process not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): it exists
    return status.rsplit(")", 1)[-1].split()[0] != "Z"
