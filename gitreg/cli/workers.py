"""`gitreg serve --workers N`: N server processes on one port, for a host with several cores.

The parent binds the port once (so `--port 0` picks one port for all, and a port in use fails
before anything forks), then forks N workers that each listen on it with SO_REUSEPORT: the
kernel spreads connections across them, with no accept lock and no shared listening queue.
Each worker is a whole gitreg (its own event loop, tag cache, git processes); they agree
through Redis (`[cache] backend = "redis"`), which is why memory refuses N > 1.

Each worker is also a replica on disk: worker 0 keeps `[storage] path` itself (what one
process kept there before stays in use), worker n > 0 keeps `<path>/workers/<n>`, and each
gets `[storage] max_bytes / N`. Workers sharing one directory raced (a mirror renamed into
place by two of them, "Directory not empty"; one evicting what another was reading) and each
counted only its own bytes against the whole bound. Apart, nothing is shared but Redis, as
between replicas, and the bound holds for the N of them together.

The parent only supervises: SIGTERM or SIGINT is forwarded to every worker and the parent
exits when they have; a worker that dies on its own stops the others (exit 1), so the
service manager (systemd, Kubernetes) restarts the whole, rather than serving at reduced
capacity without anyone noticing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gitreg.config.model import Config

log = logging.getLogger(__name__)


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT and not listening: it holds the port for the workers."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def run_workers(config: Config, workers: int, serve: Callable[[Config], None]) -> int:
    """Fork `workers` processes running `serve(config)` on one port; return the parent's exit code."""
    reserved = reserve_port(config.server.host, config.server.port)  # OSError: the caller reports it
    port = reserved.getsockname()[1]
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, port=port))
    group = _Workers()
    previous = {sig: signal.signal(sig, group.forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for number in range(workers):
            pid = os.fork()
            if pid == 0:
                _worker(number, worker_config(config, number, workers), serve, previous, reserved)
            group.children[pid] = number
            if group.stopping:  # a signal arrived while forking: the new worker gets it too
                _signal(pid, signal.SIGTERM)
        log.info("gitreg: %d workers (pids %s) on port %d", workers, " ".join(map(str, group.children)), port)
        return group.wait()
    finally:
        reserved.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def worker_config(config: Config, number: int, workers: int) -> Config:
    """Worker `number`'s config: its own storage directory and its share of `[storage] max_bytes`."""
    path = config.storage.path if number == 0 else os.path.join(config.storage.path, "workers", str(number))
    storage = dataclasses.replace(config.storage, path=path, max_bytes=max(1, config.storage.max_bytes // workers))
    return dataclasses.replace(config, storage=storage)


class _Workers:
    """The parent's view of its workers: who runs, and whether they are being stopped."""

    def __init__(self) -> None:
        self.children: dict[int, int] = {}  # pid -> worker number
        self.stopping = False

    def forward(self, signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT to the parent: stop every worker."""
        self.stopping = True
        for pid in list(self.children):
            _signal(pid, signal.SIGTERM)

    def wait(self) -> int:
        """Reap the workers; the first to exit unasked stops the others (exit code 1)."""
        code = 0
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid not in self.children:  # not a worker (none is forked otherwise, but never guess)
                continue
            number = self.children.pop(pid)
            exit_code = os.waitstatus_to_exitcode(status)
            if not self.stopping:
                log.error("worker %d (pid %d) exited with %d; stopping the others", number, pid, exit_code)
                self.stopping, code = True, 1
                for other in list(self.children):
                    _signal(other, signal.SIGTERM)
            elif exit_code != 0:
                code = 1
        return code


def _worker(
    number: int,
    config: Config,
    serve: Callable[[Config], None],
    previous: dict[signal.Signals, Any],
    reserved: socket.socket,
) -> NoReturn:
    """The forked worker: serve until stopped, then leave without running the parent's cleanup."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)  # its event loop installs its own
    reserved.close()
    code = 1
    try:
        os.makedirs(config.storage.path, exist_ok=True)
        serve(config)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        log.exception("worker %d failed", number)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
