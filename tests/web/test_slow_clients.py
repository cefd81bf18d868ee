"""Slow and greedy clients against a real `gitreg serve`: deadlines on every listener, 503 when out of descriptors.

Connections that never finish their request headers (trickling a byte at a time, or silent
before the TLS handshake) are closed after `[server] idle_timeout_seconds`, as are idle
keep-alive connections; while they are held the server keeps answering others. A server at
its file-descriptor limit answers a request that needs git with the one JSON error shape,
503 and Retry-After, logs one line and no traceback, and serves again once descriptors free up.
"""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.process import GitregProcess
from tests.support.repos import GitRepo
from tests.support.tls import write_tls_files

# Left out of the fast subset (`-m "not slow"`): real gitreg processes and clients that wait out idle timeouts.
pytestmark = pytest.mark.slow

IDLE = 2  # [server] idle_timeout_seconds in these tests
SLACK = 3.0  # the event loop, the 2-core machine: a generous bound, not a timer


def hello_repo(tmp_path: Path, name: str = "hello") -> GitRepo:
    repo = GitRepo(tmp_path / "repos", name)
    repo.commit({"main.tf": "#\n"})
    repo.tag("v1.0.0")
    return repo


def write_config(tmp_path: Path, repo: GitRepo, server: str = "", cache: str = "", idle: float = IDLE) -> Path:
    config = tmp_path / "gitreg.toml"
    config.write_text(
        f"[server]\nidle_timeout_seconds = {idle}\n{server}"
        f'[storage]\npath = "{tmp_path / "store"}"\n'
        f"[cache]\n{cache}"
        # No background index: `cold` must still be cold when the test asks for it.
        f"[index]\nenabled = false\n"
        f'[[modules]]\nnamespace = "demo"\nname = "hello"\nsystem = "null"\nrepository = "{repo.url}"\n'
        # another repository: its tag list is not cached when hello's is
        '[[modules]]\nnamespace = "demo"\nname = "cold"\nsystem = "null"\n'
        f'repository = "{hello_repo(tmp_path, "cold").url}"\n'
    )
    return config


def address(server: GitregProcess) -> tuple[str, int]:
    host, port = server.url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def closed_after(socks: list[socket.socket], trickle: bool, limit: float) -> list[float]:
    """Seconds until the server closed each socket (inf if still open after `limit`).

    With `trickle`, every open socket sends one more header byte every 0.25 s, as a
    slowloris client does to look alive.
    """
    start = time.monotonic()
    closed: dict[socket.socket, float] = {}
    for s in socks:
        s.setblocking(False)  # a TLS socket is readable for records that carry no data (session tickets)
    while len(closed) < len(socks) and time.monotonic() - start < limit:
        open_socks = [s for s in socks if s not in closed]
        readable, _, _ = select.select(open_socks, [], [], 0.25)
        for s in readable:
            try:
                data = s.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                continue  # nothing for the application yet: still open
            except OSError:  # reset, or TLS cut short
                data = b""
            if not data:
                closed[s] = time.monotonic() - start
        if trickle:
            for s in open_socks:
                if s in closed:
                    continue
                try:
                    s.send(b"a")
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    pass
                except OSError:
                    closed[s] = time.monotonic() - start
    return [closed.get(s, float("inf")) for s in socks]


def get_json(url: str, context: ssl.SSLContext | None = None) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_connections_that_trickle_their_headers_are_closed_after_the_idle_timeout(tmp_path, scheme):
    repo = hello_repo(tmp_path)
    server_tls = ""
    client_context = None
    if scheme == "https":
        write_tls_files(tmp_path)
        server_tls = f'tls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n'
        client_context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    config = write_config(tmp_path, repo, server=server_tls)
    with GitregProcess("--config", str(config)) as server:
        assert server.url.startswith(f"{scheme}://")
        host, port = address(server)
        socks = []
        for _ in range(50):
            s = socket.create_connection((host, port), timeout=10)
            if client_context is not None:
                s = client_context.wrap_socket(s, server_hostname=host)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: registry\r\nX-Slow: ")  # and never the end of the headers
            socks.append(s)
        # While they are held, everyone else is served as usual.
        assert get_json(f"{server.url}/healthz", client_context)[0] == 200
        times = closed_after(socks, trickle=True, limit=IDLE + 10)
        for s in socks:
            s.close()
    assert max(times) <= IDLE + SLACK, sorted(times)
    assert min(times) >= IDLE - 0.5, sorted(times)  # the deadline, not an early cut of a live client
    assert "Traceback" not in "".join(server.log)


def test_a_silent_connection_to_the_tls_listener_is_closed_before_its_handshake(tmp_path):
    repo = hello_repo(tmp_path)
    write_tls_files(tmp_path)
    config = write_config(
        tmp_path, repo, server=f'tls_cert = "{tmp_path / "cert.pem"}"\ntls_key = "{tmp_path / "key.pem"}"\n'
    )
    with GitregProcess("--config", str(config)) as server:
        socks = [socket.create_connection(address(server), timeout=10) for _ in range(20)]  # no ClientHello, ever
        times = closed_after(socks, trickle=False, limit=IDLE + 10)
        for s in socks:
            s.close()
    # asyncio's own default would hold each for 60 s
    assert max(times) <= IDLE + SLACK, sorted(times)


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(tmp_path):
    repo = hello_repo(tmp_path)
    config = write_config(tmp_path, repo)
    with GitregProcess("--config", str(config)) as server:
        s = socket.create_connection(address(server), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: registry\r\n\r\n")
        answer = b""
        while b'"ok"' not in answer:
            answer += s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        (waited,) = closed_after([s], trickle=False, limit=IDLE + 10)
        s.close()
    assert IDLE - 0.5 <= waited <= IDLE + SLACK


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def read_answer(s: socket.socket) -> tuple[int, dict[str, str], dict]:
    """One HTTP/1.1 answer with a Content-Length, read from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += s.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_out_of_file_descriptors_is_a_503_with_retry_after_one_log_line_and_no_traceback(tmp_path):
    repo = hello_repo(tmp_path)
    # error_retry_seconds = 0: the retry below reaches git again instead of the remembered 503
    config = write_config(tmp_path, repo, cache="error_retry_seconds = 0\n", idle=60)
    with GitregProcess("--config", str(config)) as server:
        pid = server.proc.pid
        assert get_json(f"{server.url}/v1/modules/demo/hello/null/versions")[0] == 200  # warm: no git needed below
        time.sleep(0.5)  # that connection is closed and its descriptor freed
        held = 12  # more than git needs (its stderr file, pipes): all free again once these close
        limit = open_fds(pid) + held
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
        socks = [socket.create_connection(address(server), timeout=10) for _ in range(held)]
        deadline = time.monotonic() + 10
        while open_fds(pid) < limit and time.monotonic() < deadline:
            time.sleep(0.05)
        assert open_fds(pid) == limit  # every descriptor the server may open is in use
        # One more client while none is left: uvloop (libuv) accepts it on a descriptor it keeps in
        # reserve and closes it at once: refused without an answer, never left hanging in the backlog.
        refused = socket.create_connection(address(server), timeout=10)
        refused.sendall(b"GET /v1/modules/demo/hello/null/versions HTTP/1.1\r\nHost: registry\r\n\r\n")
        try:
            answered = refused.recv(65536)
        except ConnectionResetError:
            answered = b""
        assert answered == b""  # closed (a reset or end of file), at once: the recv had 10 s
        refused.close()
        # A cached answer needs no descriptor: served.
        socks[0].sendall(b"GET /v1/modules/demo/hello/null/versions HTTP/1.1\r\nHost: registry\r\n\r\n")
        assert read_answer(socks[0])[0] == 200
        # A cold module needs git, which needs descriptors: 503, the JSON error shape, Retry-After.
        socks[1].sendall(b"GET /v1/modules/demo/cold/null/versions HTTP/1.1\r\nHost: registry\r\n\r\n")
        status, headers, body = read_answer(socks[1])
        assert status == 503, body
        assert headers["content-type"].startswith("application/json")
        assert set(body) == {"errors"} and "out of file descriptors" in body["errors"][0]
        assert int(headers["retry-after"]) > 0
        for s in socks:
            s.close()
        time.sleep(0.5)  # the server notices the closes
        # Descriptors are free again: a new client is served, the cold module too.
        assert get_json(f"{server.url}/v1/modules/demo/hello/null/versions")[0] == 200
        status, _, body = get_json(f"{server.url}/v1/modules/demo/cold/null/versions")
        assert status == 200 and body["modules"][0]["versions"] == [{"version": "1.0.0"}]
    log = "".join(server.log)
    assert "Traceback" not in log and "Too many open files" in log, log[-3000:]
    assert log.count("cannot start git") == 1, log[-3000:]
