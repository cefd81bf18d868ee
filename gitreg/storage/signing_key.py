"""The signing key gitreg makes for itself when `[auth] signing_key` is not set.

Archive mode (the default download mode) hands Terraform signed archive URLs when registry auth
is on: Terraform fetches the archive without its token. A config without `[auth] signing_key`
still starts: `gitreg serve` makes a random key once, keeps it in `[storage] path/signing-key`
(mode 0600) and reads it back at every start, so URLs and page sessions outlive a restart and
every `--workers` process (forked after the key is read) checks what another one signed.
Replicas with storage of their own each make their own key: they need one shared key in the
config instead (`gitreg check` says so).

The file is written to a temporary name and linked into place only when complete, and only
when no key is there yet (`os.link` refuses to replace one): two starts racing keep one key,
and a crash never leaves a half-written key that would be believed. The key itself is never
logged, and never put in argv, URLs or error bodies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import tempfile
from pathlib import Path

from gitreg.config.model import Config

log = logging.getLogger(__name__)

KEY_FILE = "signing-key"
_TMP_PREFIX = ".signing-key-"
# What gitreg writes: 64 hex digits (32 random bytes), as `openssl rand -hex 32` makes.
_KEY_RE = re.compile(r"[0-9a-f]{64}")


class DamagedKey(Exception):
    """The key file exists but does not hold a key gitreg wrote."""


def needs_stored_key(config: Config) -> bool:
    """True when URLs must be signed (registry auth on) and the config names no key: a generated one is used."""
    return config.auth.enabled and config.auth.signing_key is None


def with_stored_key(config: Config) -> Config:
    """`config` with `[auth] signing_key` taken from `[storage] path` (made there the first time),
    when registry auth is on and the config sets none; else `config` unchanged. Blocking (once, at
    start). OSError or DamagedKey when the file cannot be made or read."""
    if not needs_stored_key(config):
        return config
    key = stored_key(Path(config.storage.path))
    return dataclasses.replace(config, auth=dataclasses.replace(config.auth, signing_key=key))


def stored_key(directory: Path) -> str:
    """The key kept in `directory/signing-key`, made (random, 256 bits) when there is none."""
    path = directory / KEY_FILE
    if not path.exists():
        _make(path)
    text = path.read_text("ascii", errors="replace").strip()
    if not _KEY_RE.fullmatch(text):
        raise DamagedKey(
            f"{path} does not hold a key gitreg made (64 hex digits); remove it to make a new one "
            "(signed archive URLs and page sessions handed out before stop working), or set [auth] signing_key"
        )
    return text


def _make(path: Path) -> None:
    """Write a new key beside `path` and link it into place unless a key got there first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".tmp", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(32) + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):  # another start made one meanwhile: theirs is the key
            os.link(tmp, path)
            log.info(
                "made a signing key for archive URLs and page sessions in %s ([auth] signing_key is not set)", path
            )
    finally:
        Path(tmp).unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
