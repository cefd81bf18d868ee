"""The baseline for archive serving: a bare aiohttp server sending one file with FileResponse."""

from __future__ import annotations

import sys

from aiohttp import web


def main() -> None:
    """`python bench/bare_file_server.py PORT FILE`: GET/HEAD /{anything} answers FILE."""
    port, path = int(sys.argv[1]), sys.argv[2]

    async def handler(request: web.Request) -> web.FileResponse:
        return web.FileResponse(path, headers={"Content-Type": "application/gzip"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
