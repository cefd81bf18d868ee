"""Run the real `python -m gitreg serve` as a subprocess, as an operator would."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `serve`'s log line (also inside a JSON log line), or what `gitreg demo` prints.
_LISTEN_RE = re.compile(r"(?:serving \d+ module rule\(s\) on|The module browser:) (https?://[^\s\"/]+)")


class GitregProcess:
    """`python -m gitreg serve ARGS` (or `demo ARGS`) on a free port; `url` is where it listens."""

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        command: str = "serve",
        launcher: tuple[str, ...] = (sys.executable, "-m", "gitreg"),
    ) -> None:
        self.args = [command, "--port", "0", *args]
        self.launcher = launcher  # or the installed `gitreg` script, as an operator runs it
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd or ROOT
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.log: list[str] = []  # every line it printed so far (all of them once stopped)
        self._pump: threading.Thread | None = None

    def start(self, timeout: float = 20) -> GitregProcess:
        """Start and wait until the server says where it listens."""
        env = {**self.env, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [*self.launcher, *self.args],
            cwd=self.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        found = threading.Event()

        def pump() -> None:
            assert self.proc and self.proc.stdout
            for line in self.proc.stdout:
                self.log.append(line)
                m = _LISTEN_RE.search(line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        if not found.wait(timeout) or not self.url:
            self.stop()
            raise RuntimeError("gitreg did not start:\n" + "".join(self.log))
        return self

    def wait_indexed(self, timeout: float = 30) -> None:
        """Wait until the server's index has nothing left to do (`/readyz` says so)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as resp:
                state = json.loads(resp.read())
            if state["index"]["complete"] and state["index"]["queued"] == 0:
                return
            time.sleep(0.05)
        log = [line for line in self.log if "GET /readyz" not in line]
        raise AssertionError(f"the index did not settle: {state}\n" + "".join(log[-20:]))

    def stop(self, timeout: float = 15, sig: signal.Signals = signal.SIGTERM) -> int:
        """SIGTERM (or `sig`: SIGINT is Ctrl-C), wait, and return the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            if self._pump is not None:
                self._pump.join(5)  # its last lines read: `log` is whole

    def wait_for_log(self, needle: str, timeout: float = 10) -> list[str]:
        """The lines holding `needle`, once there is one (the server writes an access line as soon
        as it answered; this process reads its output on a thread)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [line for line in self.log if needle in line]
            if lines:
                return lines
            time.sleep(0.05)
        raise AssertionError(f"no log line with {needle}:\n" + "".join(self.log[-50:]))

    def __enter__(self) -> GitregProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_gitreg(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m gitreg ARGS` to completion."""
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gitreg", *args],
        cwd=cwd or ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_gitreg_on_a_taken_port(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run `python -m gitreg ARGS --port P` while another socket listens on 127.0.0.1:P; (result, P)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        return run_gitreg(*args, "--port", str(port), cwd=cwd), port
