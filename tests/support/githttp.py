"""Real git over smart HTTP: `git http-backend` behind a small threaded HTTP server.

Basic auth, per-repository counters of ref advertisements (`info/refs` requests: every git call
to a host starts with one) and of ref listings (the refs really sent: protocol v2's `ls-refs`
command, or a protocol v0 advertisement), and switchable faults for the
fault tests and benchmarks: "down" (closes the connection), "slow" (answers after `delay`
seconds), "trickle" (answers at once, then sends a byte every `trickle_interval` seconds,
forever), "garbage" (an HTML page and noise, labelled as git's answer), "error" (HTTP 500), "unauthorized" (HTTP 401),
"redirect" (a 302 to the same path and query under `redirect_to`, e.g. another server's base URL)
and "answer" (the fixed `answer`: status, headers, body; an SSO page, a JSON error...).
`hold_fetches()` makes every fetch (a request that wants objects: a clone, a mirror's fetch)
wait until `release_fetches()`, while ref listings (`ls-remote`) are answered; with
`filtered=False` a fetch of part of a commit (`--filter`, which the server allows as GitHub's and
GitLab's do: a tag's date without its files) is answered too.
Every request is recorded with its headers (`requests()`, `authorizations()`), so a test can see
which credential reached which server.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import shutil
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

# What a host answers in "garbage" mode: a captive portal's page followed by binary noise.
GARBAGE = b"<!DOCTYPE html><html><body>Sign in to continue</body></html>\n" + bytes(range(256)) * 2


@dataclass(frozen=True)
class RequestRecord:
    """One request the server saw."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: GitHttpServer

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up is not news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _record(self, status: int) -> None:
        parts = urlsplit(self.path)
        self.server.owner._record(
            RequestRecord(self.command, parts.path, parts.query, dict(self.headers.items()), status)
        )

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self._record(status)
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        owner = self.server.owner
        parts = urlsplit(self.path)
        repo = parts.path.lstrip("/").split("/", 1)[0]
        if parts.path.endswith("/info/refs") and "service=git-upload-pack" in parts.query:
            owner._count_advertisement(repo)
        mode = owner.mode
        if mode == "down":
            self._record(0)
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return
        if mode == "slow":
            if owner._stopping.wait(owner.delay):
                return
        elif mode == "trickle":
            self._trickle()
            return
        elif mode == "garbage":
            # Fixed bytes, so git fails the same way every run ("bad line length character": the
            # first four bytes must be a hex length). Random bytes made git's reaction a lottery.
            self._reply(200, GARBAGE, {"Content-Type": "application/x-git-upload-pack-advertisement"})
            return
        elif mode == "error":
            self._reply(500, b"internal error\n", {"Content-Type": "text/plain"})
            return
        elif mode == "unauthorized":
            self._reply(401, b"no\n", {"WWW-Authenticate": 'Basic realm="git"'})
            return
        elif mode == "redirect":
            location = owner.redirect_to.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")
            self._reply(302, b"moved\n", {"Location": location, "Content-Type": "text/plain"})
            return
        elif mode == "answer" and parts.path.endswith(owner.answer_path):
            status, headers, body = owner.answer
            self._reply(status, body, headers)
            return
        user = None
        if owner.username is not None and repo not in owner.public:
            user = self._authorized()
            if user is None:
                self._reply(401, b"authentication required\n", {"WWW-Authenticate": 'Basic realm="git"'})
                return
        self._cgi(parts.path, parts.query, user)

    def _trickle(self) -> None:
        # A valid start of a ref advertisement, then one 65520-byte packet sent a byte at a
        # time: never silent long enough for a plain "no answer" timeout, never finished.
        owner = self.server.owner
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
        self.end_headers()
        body = b"001e# service=git-upload-pack\n0000fff0" + b"a" * 65516
        try:
            for i in range(len(body)):
                if owner._stopping.wait(owner.trickle_interval if i >= 40 else 0):
                    return
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
        except OSError:
            pass  # the client gave up

    def _authorized(self) -> str | None:
        owner = self.server.owner
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except ValueError:
            return None
        ok = hmac.compare_digest(user, owner.username or "") and hmac.compare_digest(password, owner.password or "")
        return user if ok else None

    def _cgi(self, path: str, query: str, user: str | None) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(owner.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            # As GitHub and GitLab: a client may ask for part of a commit (`--filter=tree:0`).
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "uploadpack.allowFilter",
            "GIT_CONFIG_VALUE_0": "true",
            "HOME": str(owner.root),
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": user or "",
            "GATEWAY_INTERFACE": "CGI/1.1",
        }
        if length:
            env["CONTENT_LENGTH"] = str(length)
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol") and not owner.protocol_v0:
            env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        body = self.rfile.read(length) if length else b""
        protocol = "" if owner.protocol_v0 else self.headers.get("Git-Protocol", "")
        if _lists_refs(self.command, path, body, protocol):
            owner._count_listing(path.lstrip("/").split("/", 1)[0])
        held = b"want " in body and (owner._hold_filtered or b"filter " not in body)
        if held:  # a fetch (protocol v0 and v2), not a ref listing
            while not owner._fetches.wait(0.05):
                if owner._stopping.is_set():
                    return
        proc = subprocess.run([owner.git, "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = proc.stdout.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status = 200
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").splitlines():
            name, sep, value = line.partition(":")
            if not sep:
                continue
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers[name.strip()] = value.strip()
        with contextlib.suppress(OSError):
            self._reply(status, payload, headers)


class GitHttpServer:
    """`git http-backend` for the bare repositories under `root`, on 127.0.0.1."""

    def __init__(
        self,
        root: Path,
        *,
        username: str | None = None,
        password: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        public: set[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.username = username
        self.password = password
        self.ssl_context = ssl_context
        self.public = set(public or ())
        self.mode = "ok"
        self.delay = 30.0
        self.trickle_interval = 0.1
        self.redirect_to = ""  # "redirect" mode: the base URL every request is sent on to
        # "answer" mode: what every request gets, (status, headers, body)
        self.answer: tuple[int, dict[str, str], bytes] = (200, {"Content-Type": "text/html"}, b"<html></html>")
        self.answer_path = ""  # "answer" mode: only for paths ending so ("/git-upload-pack"); git serves the rest
        self.git = shutil.which("git") or "git"
        self.protocol_v0 = False  # True: speak protocol v0 only (it sends only advertised objects)
        self._lock = threading.Lock()
        self._advertisements: dict[str, int] = {}
        self._listings: dict[str, int] = {}
        self._requests: list[RequestRecord] = []
        self._stopping = threading.Event()
        self._fetches = threading.Event()  # set: fetches are answered
        self._fetches.set()
        self._hold_filtered = True
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    def start(self) -> GitHttpServer:
        """Listen on a free port and serve in a daemon thread."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        if self.ssl_context is not None:
            server.socket = self.ssl_context.wrap_socket(server.socket, server_side=True)
        self._server = server
        scheme = "https" if self.ssl_context else "http"
        self.base_url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (promptly, even while a "slow" request sleeps) and close the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None

    def hold_fetches(self, filtered: bool = True) -> None:
        """Fetches (clones, a mirror's fetch) wait from now on; ref listings are still answered, and
        without `filtered` so are fetches of part of a commit (`--filter`: a tag's date, no files)."""
        self._hold_filtered = filtered
        self._fetches.clear()

    def release_fetches(self) -> None:
        """Answer fetches again (the held ones too)."""
        self._fetches.set()

    def __enter__(self) -> GitHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, repo: str) -> str:
        """The clone URL of `repo` (a directory name under root, e.g. "hello.git")."""
        return f"{self.base_url}/{repo}"

    def _count_advertisement(self, repo: str) -> None:
        with self._lock:
            self._advertisements[repo] = self._advertisements.get(repo, 0) + 1

    def _count_listing(self, repo: str) -> None:
        with self._lock:
            self._listings[repo] = self._listings.get(repo, 0) + 1

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def ref_advertisements(self, repo: str | None = None) -> int:
        """How many ref advertisements (`info/refs?service=git-upload-pack`) were asked for."""
        with self._lock:
            if repo is None:
                return sum(self._advertisements.values())
            return self._advertisements.get(repo, 0)

    def ref_listings(self, repo: str | None = None) -> int:
        """How many times git sent its refs (answered or not): a protocol v2 `ls-refs` command, or a
        protocol v0 advertisement. With v2 an `info/refs` request only advertises capabilities,
        and a fetch by object name lists no refs."""
        with self._lock:
            if repo is None:
                return sum(self._listings.values())
            return self._listings.get(repo, 0)

    def requests(self) -> list[RequestRecord]:
        """Every request seen so far."""
        with self._lock:
            return list(self._requests)

    def authorizations(self) -> list[tuple[str, str, str | None]]:
        """(method, path, Authorization header or None) of every request seen so far, in order."""
        return [(r.method, r.path, _header(r.headers, "Authorization")) for r in self.requests()]

    def reset_counters(self) -> None:
        """Forget counted advertisements and requests."""
        with self._lock:
            self._advertisements.clear()
            self._listings.clear()
            self._requests.clear()


def _lists_refs(method: str, path: str, body: bytes, protocol: str) -> bool:
    """True when this request makes git send the repository's refs (see ref_listings)."""
    if method == "GET":
        return path.endswith("/info/refs") and "version=2" not in protocol
    # A v2 command request: the first pkt-line is "command=<name>" (gzip-encoded bodies are fetches).
    return path.endswith("/git-upload-pack") and body[4:19] == b"command=ls-refs"


def _header(headers: dict[str, str], name: str) -> str | None:
    """A header's value, whatever the case the client spelled its name in."""
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)
