"""Shared pieces of the benchmarks: real servers, wrk, medians. Everything stays on 127.0.0.1."""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gitreg_process import GitregProcess  # noqa: E402
from tests.support.githttp import GitHttpServer  # noqa: E402
from tests.support.repos import GitRepo  # noqa: E402

__all__ = ["ROOT", "GitregProcess", "GitHttpServer", "GitRepo", "machine", "median", "wrk", "rss_kib",
           "write_config", "workdir", "bare_ls_remote", "pct"]


def machine() -> str:
    """One line describing the machine, for the record."""
    mem = ""
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{os.cpu_count()} cores{mem}, Python {platform.python_version()}, {git}, {platform.machine()}"


def median(values: list[float]) -> float:
    """The median (0 for nothing)."""
    return statistics.median(values) if values else 0.0


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def wrk(url: str, seconds: float, connections: int = 32, threads: int = 2, headers: dict[str, str] | None = None) -> dict[str, float]:
    """Run wrk against `url`; requests/s, p50 and p99 latency in ms, and error counts."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "--timeout", "10s"]
    for k, v in (headers or {}).items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run([*args, url], capture_output=True, text=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def latency(label: str) -> float:
        m = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": rps,
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "errors": sum(int(x) for x in errors.groups()) if errors else 0,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def rss_kib(pid: int) -> int:
    """Resident memory of a process in KiB."""
    m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) if m else 0


def workdir(prefix: str) -> Path:
    """A fresh temporary directory."""
    return Path(tempfile.mkdtemp(prefix=f"gitreg-bench-{prefix}-"))


def write_config(path: Path, text: str) -> Path:
    """Write a TOML config and return its path."""
    path.write_text(text)
    return path


def bare_ls_remote(url: str, env: dict[str, str] | None = None) -> float:
    """Seconds one plain `git ls-remote --tags` of `url` takes."""
    started = time.perf_counter()
    subprocess.run(["git", "ls-remote", "--tags", url], check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **(env or {})})
    return time.perf_counter() - started


class Server:
    """A server subprocess whose output goes to a file (a pipe read by Python would be part of the load)."""

    def __init__(self, argv: list[str], log: Path, ready: str, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.started = time.perf_counter()
        self._fh = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=self._fh, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
        deadline = time.time() + 120
        self.url = ""
        while time.time() < deadline:
            text = log.read_text()
            m = re.search(ready, text)
            if m:
                self.url = m.group(1) if m.groups() else ""
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{text}")
            time.sleep(0.01)
        else:
            raise RuntimeError(f"server did not start:\n{log.read_text()}")
        self.startup_seconds = time.perf_counter() - self.started

    def stop(self) -> None:
        """SIGTERM and wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


def start_gitreg(args: list[str], log: Path) -> Server:
    """`python -m gitreg serve ARGS` on a free port, ready once /healthz answers."""
    port = free_port()
    server = Server([sys.executable, "-m", "gitreg", "serve", "--port", str(port), *args], log, r"()")
    server.url = f"http://127.0.0.1:{port}"
    wait_healthy(server.url + "/healthz", server)
    server.startup_seconds = time.perf_counter() - server.started
    return server


def wait_healthy(url: str, server: Server | None = None, timeout: float = 120) -> None:
    """Poll `url` until it answers."""
    import urllib.request

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if server is not None and server.proc.poll() is not None:
                raise RuntimeError(f"server exited:\n{server.log.read_text()}") from None
            time.sleep(0.01)
    raise RuntimeError(f"{url} did not answer")


def free_port() -> int:
    """A port nothing listens on right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
