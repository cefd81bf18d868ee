"""The baseline: a bare aiohttp server answering the same bytes as gitreg, with no logic at all.

On the event loop `web.run_app` runs by default (asyncio's); with a fourth argument `uvloop`, on
uvloop's, the loop gitreg runs on: what the same bytes cost with nothing but the loop changed.
"""

from __future__ import annotations

import json
import sys

import uvloop
from aiohttp import web


def main() -> None:
    """`python bench/bare_server.py PORT VERSIONS_JSON LOCATION [uvloop]`."""
    port, versions_body, location = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    loop = uvloop.new_event_loop() if sys.argv[4:] == ["uvloop"] else None
    download = json.dumps({"location": location})

    # The bodies are made once, as gitreg keeps its answers' text: the same bytes, nothing more.
    async def versions_handler(request: web.Request) -> web.Response:
        return web.json_response(text=versions_body)

    async def download_handler(request: web.Request) -> web.Response:
        return web.json_response(text=download, headers={"X-Terraform-Get": location})

    app = web.Application()
    app.router.add_get("/v1/modules/{namespace}/{name}/{system}/versions", versions_handler)
    app.router.add_get("/v1/modules/{namespace}/{name}/{system}/{version}/download", download_handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, loop=loop)


if __name__ == "__main__":
    main()
