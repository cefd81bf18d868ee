"""Logging set up for a process: once, by its entry point (the CLI, or the index process's).

Here, not in `logs`, so that `gitreg check` sets up logging without importing aiohttp.
"""

from __future__ import annotations

import logging
import sys


def configure_logging(level: int, log_format: str, serve: bool) -> None:
    """The root logger on stderr, text or JSON lines; for `serve` (and its index process), secrets masked."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if serve:
        from gitreg.observability.lines import SecretFilter

        for handler in logging.getLogger().handlers:  # no capability in any line, whoever logs it
            handler.addFilter(SecretFilter())
    if log_format == "json":
        from gitreg.observability.lines import JsonFormatter

        for handler in logging.getLogger().handlers:  # app and access logs alike
            handler.setFormatter(JsonFormatter())
    elif serve:
        # Access lines stay bare combined-log-format lines, as log tools expect them.
        access = logging.getLogger("aiohttp.access")
        bare = logging.StreamHandler(sys.stderr)
        bare.setFormatter(logging.Formatter("%(message)s"))
        access.addHandler(bare)
        access.propagate = False
