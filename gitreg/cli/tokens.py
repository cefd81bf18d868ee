"""`gitreg tokens list` and `gitreg tokens revoke <id|username>`: the tokens `terraform login` and
"Sign in with ..." issued (identity/issued.py), never the tokens themselves.

Both read `[storage] path/issued_tokens.json`, and with `[cache] backend = "redis"` the records
every replica shares; `revoke` writes both, so a running server refuses the token within a second.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gitreg.config.model import Config
from gitreg.core.loop import run_main
from gitreg.identity.issued import FILE_NAME, IssuedRecord, IssuedTokens
from gitreg.replicas.connection import RedisDown
from gitreg.replicas.logins import SharedLogins

EXIT_OK, EXIT_NONE, EXIT_CONFIG = 0, 1, 2
_COLUMNS = ("ID", "USERNAME", "FORGE", "KIND", "CREATED", "EXPIRES", "REVOKED")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: Callable[[argparse.ArgumentParser], None]
) -> None:
    """`gitreg tokens list|revoke`; `common` adds --config and the logging options."""
    tokens = sub.add_parser("tokens", help="list or revoke the registry tokens terraform login and sign-in issued")
    actions = tokens.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every issued token: id, username, forge, created, expires, revoked")
    revoke = actions.add_parser("revoke", help="revoke a token by its id, or every token of a username")
    revoke.add_argument("selector", metavar="ID|USERNAME")
    for p in (listing, revoke):
        common(p)


def _when(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)) if seconds is not None else "-"


def _row(record: IssuedRecord, labels: dict[str, str]) -> tuple[str, ...]:
    return (
        record.id,
        record.username,
        labels.get(record.forge, record.forge),
        record.kind,
        _when(record.created),
        _when(record.expires),
        _when(record.revoked),
    )


def _print_table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    for row in [_COLUMNS, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


async def _tokens(config: Config, action: str, selector: str | None) -> int:
    cache = config.cache
    url = cache.redis_url if cache.backend == "redis" else None
    shared = SharedLogins.connect(url, cache.redis_prefix) if url else None
    store = IssuedTokens(config, Path(config.storage.path) / FILE_NAME, shared=shared)
    try:
        await store.load()
        try:
            await store.load_shared()
        except RedisDown as e:
            print(f"gitreg: redis is unreachable ({e}); only this storage's tokens are shown", file=sys.stderr)
        if action == "list":
            labels = {f.url: f.label for f in config.auth.forges}
            _print_table([_row(r, labels) for r in store.records()])
            return EXIT_OK
        revoked = await store.revoke(selector or "")
        if not revoked:
            print(f"gitreg: no active token has the id or username {selector!r}", file=sys.stderr)
            return EXIT_NONE
        for record in revoked:
            print(f"revoked {record.id} ({record.username}, {record.kind})")
        return EXIT_OK
    finally:
        await store.close()


def run(config: Config, args: argparse.Namespace) -> int:
    """`gitreg tokens ...`; exit 0, 1 when `revoke` matched no active token, 2 without OAuth configured."""
    if config.auth.signing_key is None:
        print("gitreg: no tokens are issued here: terraform login needs [auth] signing_key and", file=sys.stderr)
        print("  an [[auth.forges]] entry with oauth_client_id and oauth_client_secret", file=sys.stderr)
        return EXIT_CONFIG
    return run_main(_tokens(config, args.action, getattr(args, "selector", None)))
