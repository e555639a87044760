"""``statestore local`` as a separate process, as a user runs it: started, read until it says it is ready,
its ``export`` lines taken, killed however a test wants, and its descendants found through ``/proc``."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

READY = "Press Ctrl-C to stop."


class RuntimeProcess:
    """A running ``statestore local``. Build with :meth:`start`."""

    def __init__(self, process: subprocess.Popen[str], stderr: Path) -> None:
        """Use :meth:`start`."""
        self.process = process
        self.stderr = stderr
        self.printed = ""
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    @classmethod
    def start(
        cls,
        command: Sequence[str],
        *,
        stderr: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 300.0,
    ) -> RuntimeProcess:
        """Run ``command`` (``statestore local ...``) and wait until it prints that it is ready. Raises
        AssertionError with what it printed if it ends or takes longer than ``timeout`` seconds."""
        with open(stderr, "w") as err:
            process = subprocess.Popen(
                list(command), stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=cwd
            )
        runtime = cls(process, stderr)
        runtime._read_until(READY, timeout)
        return runtime

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read_until(self, marker: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.printed += line
            if marker in line:
                return
        self.process.kill()
        self.process.wait()
        raise AssertionError(
            f"statestore local printed no {marker!r} (exit {self.process.poll()}):\n{self.printed}\n"
            f"{self.stderr.read_text()}"
        )

    @property
    def exports(self) -> list[str]:
        """The ``export NAME=VALUE`` lines it printed, as a user would paste them."""
        return [line.strip() for line in self.printed.splitlines() if line.strip().startswith("export ")]

    def environment(self) -> dict[str, str]:
        """The variables of :attr:`exports`, as a shell that ran them would have them."""
        names = {line.split("=", 1)[0].removeprefix("export ") for line in self.exports}
        script = "\n".join([*self.exports, "env -0"])
        output = subprocess.run(["bash", "-c", script], env={}, capture_output=True, check=True).stdout
        pairs = (item.split("=", 1) for item in output.decode().split("\0") if "=" in item)
        return {name: value for name, value in pairs if name in names}

    def descendants(self) -> list[int]:
        """The ids of every process started by it, directly or not."""
        return descendants(self.process.pid)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is cleaned up."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, as Ctrl-C or a service manager would; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)


def descendants(pid: int) -> list[int]:
    """The ids of the processes whose parent chain leads to ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, p in parents.items() if p == parent]
        found += children
        frontier += children
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, ended but not reaped by its new parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until_gone(pids: Sequence[int], timeout: float) -> list[int]:
    """Wait up to ``timeout`` seconds for ``pids`` to end; returns those still running."""
    deadline = time.monotonic() + timeout
    left = [pid for pid in pids if running(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if running(pid)]
    return left


def statestore_command(*args: str) -> list[str]:
    """``statestore ARGS`` with this interpreter (the checkout's package)."""
    return [str(Path(sys.executable).with_name("statestore")), *args]
