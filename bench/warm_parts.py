"""Where the operator's warm path goes, part by part (issue 25): an attribution, not a target.

    python bench/warm_parts.py [--requests 20000] [--rounds 5]

Each configuration runs in a process of its own: a real aiohttp server on 127.0.0.1 and a client
in the same process pipelining 8 `versions` requests at a time on each of 25 connections (the
same request, token and config as `bench/warm_path.py --operator`). The figure is the process's
CPU time per request, both ends included, median of the rounds: in one process and without
wrk, the machine's noise moves it far less than requests/s, which is what the target in
`warm_path.py --operator` is measured by. Going down the table switches one more part off:

- `operator`: gitreg as `gitreg serve` runs it (access log on, static bearer token);
- `no access log`: the access logger replaced by one that writes nothing;
- `no auth`: and no `[auth] tokens` (the token is sent and not asked for);
- `unwrapped handlers`: and the routes registered without gitreg's request wrapper
  (routing.Routes: timing, metrics, input checks, error shaping);
- `constant handler`: and the versions handler answering the same bytes without looking anything up;
- `bare`: bench/bare_server.py's aiohttp app (no middleware, no access log).

Every row runs on gitreg's event loop (uvloop, `gitreg.core.loop.run_main`), the bare one too:
the rows differ by gitreg's own work only. The switched-off variants replace parts of gitreg in
the benchmark's process, which is what an attribution needs; the `operator` row runs gitreg
unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from _common import machine, start_gitreg, workdir
from warm_path import OPERATOR_TOKEN as TOKEN
from warm_path import operator_config

PATH = "/v1/modules/demo/hello/null/versions"
CONNECTIONS, PIPELINED = 25, 8
PARTS = ["operator", "no access log", "no auth", "unwrapped handlers", "constant handler", "bare"]


async def _client(port: int, requests: int) -> None:
    request = f"GET {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    while done < requests:
        writer.write(request * PIPELINED)
        answered, received = 0, b""
        while answered < PIPELINED:
            chunk = await reader.read(65536)
            if not chunk:
                raise SystemExit("the server closed the connection")
            received += chunk
            answered = received.count(b"HTTP/1.1 200")
        done += PIPELINED
    writer.close()


class _Silent(AbstractAccessLogger):
    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        pass


def _app(part: int, config_path: str, body: bytes) -> web.AppRunner:
    """The runner of configuration `PARTS[part]` (see the module docstring)."""
    if PARTS[part] == "bare":

        async def versions(request: web.Request) -> web.Response:
            return web.json_response(text=body.decode())

        app = web.Application()
        app.router.add_get("/v1/modules/{namespace}/{name}/{system}/versions", versions)
        return web.AppRunner(app, access_log=None)
    from gitreg.config.parse import load_config
    from gitreg.index.process import serve_role
    from gitreg.observability.logs import AccessLogger
    from gitreg.web import app as webapp
    from gitreg.web.api import modules

    if part >= PARTS.index("unwrapped handlers"):
        from gitreg.web.routing import Routes

        Routes._wrap = lambda self, handler, label, rule, page: handler  # type: ignore[method-assign]
    if part >= PARTS.index("constant handler"):

        async def constant(request: web.Request) -> web.Response:
            return web.Response(body=body, headers=modules.JSON_HEADERS)

        for route in modules.routes:
            if isinstance(route, web.RouteDef) and route.path.endswith("/versions"):
                object.__setattr__(route, "handler", constant)
    config = load_config(config_path)
    if part >= PARTS.index("no auth"):
        config = load_config(config_path.replace(".toml", "-open.toml"))
    logger = _Silent if part >= PARTS.index("no access log") else AccessLogger
    return web.AppRunner(webapp.create_app(config, role=serve_role(config)), access_log_class=logger)


async def _measure(part: int, config_path: str, body: bytes, requests: int, rounds: int) -> list[float]:
    runner = _app(part, config_path, body)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    per_connection = requests // CONNECTIONS
    try:
        await asyncio.gather(*(_client(port, 400) for _ in range(CONNECTIONS)))  # warm every cache
        figures = []
        for _ in range(rounds):
            started = time.process_time()
            await asyncio.gather(*(_client(port, per_connection) for _ in range(CONNECTIONS)))
            figures.append((time.process_time() - started) / (per_connection * CONNECTIONS) * 1e6)
        return figures
    finally:
        await runner.cleanup()


def child(args: argparse.Namespace) -> int:
    """One configuration, in this process: print its figures as JSON."""
    from gitreg.observability.setup import configure_logging

    configure_logging(logging.INFO, "text", True)
    log_to = open(args.log, "a")  # noqa: SIM115 - open while the server runs
    for handler in [*logging.getLogger().handlers, *logging.getLogger("aiohttp.access").handlers]:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(log_to)
    from gitreg.core.loop import run_main

    body = Path(args.body).read_bytes()
    figures = run_main(_measure(args.part, args.config, body, args.requests, args.rounds))  # every row on gitreg's loop
    print(json.dumps(figures))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--part", type=int, help=argparse.SUPPRESS)  # the child process's configuration
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--body", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part is not None:
        return child(args)

    base = workdir("warm-parts")
    config = operator_config(base)
    operator_config(base, auth=False)  # gitreg-open.toml, for the rows without auth
    server = start_gitreg(["--config", str(config)], base / "gitreg.log")
    try:  # the answer's bytes, and the tag list fetched once into the state the children load
        request = urllib.request.Request(server.url + PATH, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request) as resp:
            (base / "body.json").write_bytes(resp.read())
    finally:
        server.stop()
    results: dict[str, list[float]] = {}
    for part, name in enumerate(PARTS):
        argv = [sys.executable, __file__, "--part", str(part), "--config", str(config), "--body"]
        argv += [str(base / "body.json"), "--log", str(base / "parts.log")]
        argv += ["--requests", str(args.requests), "--rounds", str(args.rounds)]
        out = subprocess.run(argv, check=True, capture_output=True, text=True, env=os.environ).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
    print(
        f"# warm path by part: python bench/warm_parts.py --requests {args.requests} --rounds {args.rounds}: "
        f"{CONNECTIONS} connections x {PIPELINED} pipelined, client in the server's process; medians"
    )
    print(f"# machine: {machine()}")
    print("| what runs | CPU µs per request (client included) | less than the row above |")
    print("| --- | ---: | ---: |")
    previous = None
    for name, figures in results.items():
        figure = statistics.median(figures)
        less = "" if previous is None else f"{previous - figure:.1f}"
        print(f"| {name} | {figure:.1f} | {less} |")
        previous = figure
    return 0


if __name__ == "__main__":
    sys.exit(main())
