"""The data directory's permissions and its lock: one runtime at a time, and a restart after a crash waits
for the crashed runtime's processes to let go instead of failing or sharing the files with them."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from statestore.local.data_dir import LOCK_FILE, DataDirLock, make_private_dirs, prepare


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_dir_and_its_missing_parents_are_private(tmp_path: Path) -> None:
    make_private_dirs(tmp_path / "a" / "b" / "data")

    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/data")] == [0o700, 0o700, 0o700]


def test_an_existing_data_dir_open_to_others_is_narrowed_to_its_user(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)

    prepare(data)

    assert mode(data) == 0o700


def test_the_lock_file_is_private_and_names_its_holder(tmp_path: Path) -> None:
    lock = DataDirLock.acquire(tmp_path / "data")
    try:
        assert mode(tmp_path / "data" / LOCK_FILE) == 0o600
        assert (tmp_path / "data" / LOCK_FILE).read_text().strip() == str(os.getpid())
    finally:
        lock.release()


HOLDER = """
import os, sys, time
from pathlib import Path
from statestore.local.data_dir import DataDirLock
lock = DataDirLock.acquire(Path(sys.argv[1]))
if sys.argv[2] == "with-child":  # a child that inherits the lock, as DynamoDB Local does
    child = os.fork()
    if child == 0:
        time.sleep(600)
        os._exit(0)
    print(child, flush=True)
else:
    print(os.getpid(), flush=True)
time.sleep(600)
"""


def start_holder(data: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    """A process holding the lock of ``data``; returns it and the id of the process holding the lock last."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(data), mode], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    return holder, int(holder.stdout.readline())


def test_a_second_runtime_is_refused_at_once_naming_the_running_one(tmp_path: Path) -> None:
    holder, pid = start_holder(tmp_path, "alone")
    try:
        with pytest.raises(ValueError, match=f"in use by another local runtime \\(process {pid}\\)"):
            DataDirLock.acquire(tmp_path, orphan_wait=60)
    finally:
        holder.kill()
        holder.wait()


def test_after_a_kill_the_lock_waits_for_the_dead_runtimes_children_then_is_taken(tmp_path: Path) -> None:
    holder, child = start_holder(tmp_path, "with-child")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    taken: list[DataDirLock] = []
    waiting = threading.Thread(target=lambda: taken.append(DataDirLock.acquire(tmp_path, orphan_wait=120)))
    waiting.start()
    waiting.join(timeout=1)
    assert waiting.is_alive() and taken == []  # the child still holds the directory: no second user

    os.kill(child, signal.SIGKILL)
    waiting.join(timeout=120)

    assert len(taken) == 1 and (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    taken[0].release()


def test_a_dead_runtimes_child_that_never_lets_go_is_named_after_the_wait(tmp_path: Path) -> None:
    holder, child = start_holder(tmp_path, "with-child")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    try:
        with pytest.raises(ValueError, match="still held by a process of a local runtime that ended .*fuser"):
            DataDirLock.acquire(tmp_path, orphan_wait=0.5)
    finally:
        os.kill(child, signal.SIGKILL)
