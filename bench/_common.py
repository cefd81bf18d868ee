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

import contextlib

from tests.support.githttp import GitHttpServer
from tests.support.process import GitregProcess
from tests.support.repos import GitRepo

__all__ = [
    "GIT_ENV",
    "ROOT",
    "GitHttpChild",
    "GitHttpServer",
    "GitRepo",
    "GitregProcess",
    "Server",
    "bare_ls_remote",
    "copy_repo",
    "cpu_seconds",
    "free_port",
    "github_signature",
    "index_process_pids",
    "index_process_rss_kib",
    "machine",
    "median",
    "pct",
    "pinning",
    "proc_stats",
    "raise_nofile",
    "rss_kib",
    "start_gitreg",
    "tagged_repo",
    "wait_healthy",
    "workdir",
    "write_config",
    "wrk",
]

# What gitreg gives git too: no system or global config of the machine running the benchmark.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}


def found(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    """The first match of `pattern` in a tool's output; a RuntimeError naming it when there is none."""
    match = re.search(pattern, text, flags)
    if match is None:
        raise RuntimeError(f"no {pattern!r} in:\n{text}")
    return match


def machine() -> str:
    """One line describing the machine, for the record."""
    mem = ""
    try:
        kib = int(found(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, RuntimeError):
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


def pinning() -> tuple[str, str, int] | None:
    """(server CPU, client CPUs, client threads) to keep a one-threaded server and the load
    generator off each other's cores; None on one core or without taskset."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or shutil.which("taskset") is None:
        return None
    return str(cpus[-1]), ",".join(str(c) for c in cpus[:-1]), len(cpus) - 1


def taskset(cpus: str | None) -> list[str]:
    """The argv prefix that runs a command on `cpus` (nothing for None)."""
    return ["taskset", "-c", cpus] if cpus else []


def wrk(
    url: str,
    seconds: float,
    connections: int = 32,
    threads: int = 2,
    headers: dict[str, str] | None = None,
    script: Path | None = None,
    cpus: str | None = None,
) -> dict[str, float]:
    """Run wrk against `url` (with a Lua `script`, on `cpus` if given); requests, requests/s, p50
    and p99 latency in ms, socket errors (total and by kind) and non-2xx/3xx answers."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    args = [
        *taskset(cpus),
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "--timeout",
        "10s",
    ]
    for k, v in (headers or {}).items():
        args += ["-H", f"{k}: {v}"]
    if script is not None:
        args += ["-s", str(script)]
    proc = subprocess.run([*args, url], capture_output=True, text=True, timeout=seconds + 60)
    out = proc.stdout
    if "Requests/sec" not in out:
        raise RuntimeError(f"wrk failed on {url}:\n{out}{proc.stderr}")
    rps = float(found(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def latency(label: str) -> float:
        m = found(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    names = ("connect", "read", "write", "timeout")
    kinds = dict(zip(names, (int(x) for x in errors.groups()), strict=False)) if errors else {}
    return {
        "requests": int(found(r"(\d+) requests in", out).group(1)),
        "rps": rps,
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "errors": sum(kinds.values()),
        **{f"errors_{k}": v for k, v in kinds.items()},
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def rss_kib(pid: int) -> int:
    """Resident memory of a process in KiB."""
    m = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) if m else 0


def index_process_pids(pid: int) -> list[int]:
    """The index process(es) `gitreg serve` (pid) runs (gitreg/indexer.py): one, or none between restarts."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            if b"gitreg.indexer" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except FileNotFoundError:
            continue
    return found


def index_process_rss_kib(pid: int) -> int:
    """Resident memory (KiB) of the index process of `gitreg serve` (pid); 0 if none."""
    return sum(rss_kib(child) for child in index_process_pids(pid))


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process used itself so far, its children not counted."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    subprocess.run(
        ["git", "ls-remote", "--tags", url],
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV, **(env or {})},
    )
    return time.perf_counter() - started


class Server:
    """A server subprocess whose output goes to a file (a pipe read by Python would be part of the load)."""

    def __init__(
        self,
        argv: list[str],
        log: Path,
        ready: str,
        env: dict[str, str] | None = None,
        cpus: str | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.log = log
        self.started = time.perf_counter()
        self._fh = log.open("w")
        # taskset execs the command: the pid stays the server's.
        self.proc = subprocess.Popen(
            [*taskset(cpus), *argv],
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(cwd), **(env or {})},
        )
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


def start_gitreg(
    args: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    cpus: str | None = None,
    root: Path = ROOT,
    niceness: int = 0,
) -> Server:
    """`python -m gitreg serve ARGS` on a free port (on `cpus` if given), ready once /healthz answers.

    `root` is the source tree whose gitreg runs (another checkout, e.g. an older commit, to
    compare); `niceness`, when not 0, starts it under `nice -n`. `startup_seconds` is from
    process start until /healthz first answered.
    """
    port = free_port()
    niced = ["nice", "-n", str(niceness)] if niceness else []
    argv = [*niced, sys.executable, "-m", "gitreg", "serve", "--port", str(port), *args]
    server = Server(argv, log, r"()", env, cpus, root)
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
        port: int = s.getsockname()[1]
        return port


def proc_stats(pid: int) -> dict[str, int]:
    """RSS (KiB), open file descriptors, threads and child processes of a running process."""
    status = Path(f"/proc/{pid}/status").read_text()
    children = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            children += len((task / "children").read_text().split())
    return {
        "rss_kib": int(found(r"VmRSS:\s+(\d+)", status).group(1)),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "threads": int(found(r"Threads:\s+(\d+)", status).group(1)),
        "children": children,
    }


def raise_nofile(wanted: int) -> int:
    """Raise this process's open-file limit (children inherit it) towards `wanted`; the new soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def github_signature(secret: str, body: bytes) -> str:
    """`X-Hub-Signature-256` as GitHub computes it: `sha256=` + hex HMAC-SHA256 of the raw body."""
    import hashlib
    import hmac

    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout.strip()


def tagged_repo(bare: Path, tags: int, prefix: str = "v") -> Path:
    """A bare repository with one commit and `tags` lightweight tags v0.0.0, v0.0.1, ...

    The tags are written straight into `packed-refs` (what `git pack-refs` would write):
    10,000 `git tag` calls would take minutes, this takes milliseconds.
    """
    _git("init", "--quiet", "--bare", "-b", "main", str(bare))
    tree = _module_tree(bare)
    commit = _git("commit-tree", tree, "-m", "module", cwd=bare)
    _git("update-ref", "refs/heads/main", commit, cwd=bare)
    lines = ["# pack-refs with: peeled fully-peeled sorted"]
    names = sorted(f"refs/tags/{prefix}{i // 10000}.{i // 100 % 100}.{i % 100}" for i in range(tags))
    lines += [f"{commit} {name}" for name in names]
    (bare / "packed-refs").write_text("\n".join(lines) + "\n")
    return bare


def _module_tree(bare: Path) -> str:
    """A tree with one main.tf, written into `bare`."""
    blob = (
        subprocess.run(
            ["git", "hash-object", "-w", "--stdin"],
            cwd=bare,
            input=b'output "x" { value = 1 }\n',
            check=True,
            capture_output=True,
            env={**os.environ, **GIT_ENV},
        )
        .stdout.decode()
        .strip()
    )
    return (
        subprocess.run(
            ["git", "mktree"],
            cwd=bare,
            input=f"100644 blob {blob}\tmain.tf\n".encode(),
            check=True,
            capture_output=True,
            env={**os.environ, **GIT_ENV},
        )
        .stdout.decode()
        .strip()
    )


def copy_repo(template: Path, dest: Path) -> Path:
    """A distinct repository with the template's content (hard links: git objects are immutable)."""
    subprocess.run(["cp", "-al", str(template), str(dest)], check=True)
    return dest


class GitHttpChild:
    """tests/support/githttp.GitHttpServer in a process of its own.

    So the benchmark's client and the git server do not share one GIL (each would slow the
    other down). Its per-repository counts of ref advertisements are asked for over a pipe.
    """

    def __init__(
        self,
        root: Path,
        mode: str = "ok",
        delay: float = 30.0,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        """`mode` and `delay`: a fault of tests/support/githttp.py (e.g. "slow" answers after `delay` s).

        `username`/`password`: Basic auth the server requires (passed through the environment, not argv).
        """
        argv = [sys.executable, str(Path(__file__).resolve()), "githttp", str(root), mode, str(delay)]
        env = {**os.environ}
        if username is not None:
            env.update(GITREG_BENCH_GIT_USER=username, GITREG_BENCH_GIT_PASSWORD=password or "")
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        if not self.base_url.startswith("http://"):
            raise RuntimeError("the git HTTP server did not start")

    def url(self, repo: str) -> str:
        """The clone URL of `repo` (a directory name under root, e.g. "hello.git")."""
        return f"{self.base_url}/{repo}"

    def ref_advertisements(self, repo: str = "") -> int:
        """Ref advertisements (`info/refs?service=git-upload-pack`) served for `repo` (all repos when "")."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"count {repo}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def ref_listings(self, repo: str = "") -> int:
        """Times the refs of `repo` were really sent (all repos when ""): a protocol v2 `ls-refs`, or a v0
        advertisement (with v2 an `info/refs` request advertises capabilities only; see githttp.ref_listings)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"listings {repo}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def requests(self) -> int:
        """Every request the server has seen (any repository, any kind: ref advertisements, fetches...)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("requests\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def first_request_after(self, wall: float, excluding: str = "") -> float | None:
        """Wall time (time.time()) the server answered its first request at or after `wall` (for a path
        without `excluding` in it, when given); None if none yet."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"first {wall!r} {excluding}\n")
        self.proc.stdin.flush()
        answer = float(self.proc.stdout.readline())
        return answer or None

    def stop(self) -> None:
        """End the child (closing its stdin ends it)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _githttp_child(root: str, mode: str, delay: float) -> None:
    from tests.support import githttp

    # The stdlib default listen backlog is 5: under load, connects beyond it wait for a SYN
    # retransmit (1 s), which would be measured as gitreg's latency.
    githttp._Server.request_queue_size = 256
    server = GitHttpServer(
        Path(root),
        username=os.environ.get("GITREG_BENCH_GIT_USER"),
        password=os.environ.get("GITREG_BENCH_GIT_PASSWORD"),
    )
    server.mode, server.delay = mode, delay
    answered: list[tuple[float, str]] = []  # when each request was answered (wall time) and its path, in order
    record = server._record

    def timed(request: githttp.RequestRecord) -> None:
        answered.append((time.time(), request.path))
        record(request)

    server._record = timed  # type: ignore[method-assign,assignment]
    server.start()
    print(server.base_url, flush=True)
    for line in sys.stdin:
        command, _, repo = line.rstrip("\n").partition(" ")
        if command == "count":
            print(server.ref_advertisements(repo or None), flush=True)
        elif command == "listings":
            print(server.ref_listings(repo or None), flush=True)
        elif command == "requests":
            print(len(server.requests()), flush=True)
        elif command == "first":
            after, _, excluding = repo.partition(" ")
            seen = list(answered)
            print(
                next((t for t, p in seen if t >= float(after) and not (excluding and excluding in p)), 0.0), flush=True
            )
    server.stop()


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "githttp":
    _githttp_child(sys.argv[2], sys.argv[3], float(sys.argv[4]))
