"""A real `redis-server` on 127.0.0.1 for the replica tests: started in a temp dir, stopped at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest


def redis_server_or_skip() -> str:
    """The redis-server binary; a failure in CI (which installs it), a skip that says why elsewhere."""
    found = shutil.which("redis-server")
    if found is None:
        message = "redis-server is not installed (apt-get install redis-server; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """`redis-server` without persistence on a free port; `kill()` and `start()` again keep the port."""

    def __init__(self, directory: Path, password: str | None = None) -> None:
        self.binary = redis_server_or_skip()
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis://[:password@]127.0.0.1:port/0"""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> RedisServer:
        """Start and wait until it answers PING."""
        conf = self.directory / "redis.conf"
        # The password in a file, not in argv (ps shows argv to every user).
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            'save ""',
            "appendonly no",
            f"dir {self.directory}",
            "daemonize no",
            "loglevel warning",
        ]
        if self.password:
            lines.append(f"requirepass {self.password}")
        conf.write_text("\n".join(lines) + "\n")
        log = (self.directory / "redis.log").open("ab")
        self.proc = subprocess.Popen(
            [self.binary, str(conf)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ping():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start:\n" + (self.directory / "redis.log").read_text())

    def ping(self) -> bool:
        """True when the server answers (PING, after AUTH when a password is set)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                if self.password:
                    s.sendall(f"AUTH {self.password}\r\n".encode())
                    s.recv(64)
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: Redis vanishes as in a crash (no goodbye to its clients)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL if it lingers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
