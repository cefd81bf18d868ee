"""The OpenPGP keys of a `[[providers]] keys` file, and signatures verified with them by `gpgv`.

Real GnuPG, never crypto of our own: the armored keys are imported once into a GNUPGHOME of
gitreg's own (a temporary directory), exported as the binary keyring `gpgv` reads, and each
key is kept armored on its own (what the download answer's `signing_keys` carries). A detached
signature is checked by `gpgv --status-fd`, whose status lines say which key signed, or why not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

GPG_TIMEOUT_SECONDS = 30.0
MAX_GPG_OUTPUT = 1024 * 1024


class KeysError(Exception):
    """A keys file gpg cannot read, or gpg itself missing or failing."""


@dataclass(frozen=True)
class PublicKey:
    """One key of the file: its long key id (upper-case hex), fingerprint and armored public key."""

    key_id: str
    fingerprint: str
    armored: str = field(repr=False)


async def _run(argv: list[str], home: str, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run gpg or gpgv with only its home in the environment; (exit status, stdout, stderr)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GNUPGHOME": home, "LC_ALL": "C"}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    except OSError as e:
        raise KeysError(f"cannot run {argv[0]}: {e.strerror}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), GPG_TIMEOUT_SECONDS)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise KeysError(f"{argv[0]} did not finish within {GPG_TIMEOUT_SECONDS:g} s") from None
    return proc.returncode or 0, out[:MAX_GPG_OUTPUT], err[:MAX_GPG_OUTPUT]


class Keyring:
    """The keys of one keys file, imported into a GNUPGHOME of gitreg's own (`load`; `close` removes it)."""

    def __init__(self, home: tempfile.TemporaryDirectory[str], keys: tuple[PublicKey, ...]) -> None:
        self._home = home
        self.keys = keys
        self.keyring = os.path.join(home.name, "trusted.gpg")

    @classmethod
    async def load(cls, path: str) -> Keyring:
        """Import the armored keys of `path`; KeysError when gpg finds none."""
        home = tempfile.TemporaryDirectory(prefix="gitreg-gpg-")
        try:
            gpg = ["gpg", "--homedir", home.name, "--batch", "--no-autostart", "--no-tty"]
            status, _, err = await _run([*gpg, "--import", "--", path], home.name)
            if status != 0:
                raise KeysError(f"gpg cannot import {path}: {err.decode(errors='replace').strip()[-300:]}")
            _, listing, _ = await _run([*gpg, "--with-colons", "--fixed-list-mode", "--list-keys"], home.name)
            found = []
            for key_id, fingerprint in _primary_keys(listing.decode(errors="replace")):
                _, armored, _ = await _run([*gpg, "--armor", "--export", "--", fingerprint], home.name)
                found.append(PublicKey(key_id, fingerprint, armored.decode("ascii", errors="replace")))
            if not found:
                raise KeysError(f"{path} holds no OpenPGP public key")
            _, binary, _ = await _run([*gpg, "--export"], home.name)
            _write(os.path.join(home.name, "trusted.gpg"), binary)
        except BaseException:
            home.cleanup()
            raise
        return cls(home, tuple(found))

    def close(self) -> None:
        """Remove the GNUPGHOME."""
        self._home.cleanup()

    async def verify(self, data: bytes, signature: bytes) -> PublicKey | str:
        """The key whose signature over `data` `signature` is; else why not (a sentence)."""
        with tempfile.TemporaryDirectory(prefix="gitreg-sig-", dir=self._home.name) as work:
            sig_path, data_path = os.path.join(work, "sig"), os.path.join(work, "data")
            _write(sig_path, signature)  # (kilobytes, on a temporary directory: no wait worth a thread)
            _write(data_path, data)
            argv = ["gpgv", "--homedir", self._home.name, "--keyring", self.keyring, "--status-fd", "1"]
            status, out, _ = await _run([*argv, "--", sig_path, data_path], self._home.name)
        lines = [line.split()[1:] for line in out.decode(errors="replace").splitlines() if line.startswith("[GNUPG:] ")]
        valid = next((words for words in lines if words and words[0] == "VALIDSIG"), None)
        if status == 0 and valid is not None:
            primary = valid[-1] if len(valid) >= 11 else valid[1]
            key = next((k for k in self.keys if k.fingerprint == primary), None)
            if key is not None:
                return key
        kinds = {words[0]: words[1:] for words in lines if words}
        if "NO_PUBKEY" in kinds:
            missing = (kinds["NO_PUBKEY"] or ["?"])[0]
            return f"SHA256SUMS is signed by key {missing[-16:]}, which is not one of the configured keys"
        if "BADSIG" in kinds:
            return "the signature does not match SHA256SUMS (the file or the signature was changed)"
        return "SHA256SUMS.sig is not a valid OpenPGP signature"


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _primary_keys(listing: str) -> list[tuple[str, str]]:
    """(long key id, fingerprint) of each primary key in `gpg --with-colons` output."""
    found: list[tuple[str, str]] = []
    pending: str | None = None
    for line in listing.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            pending = fields[4].upper()
        elif fields[0] == "fpr" and pending is not None:
            found.append((pending, fields[9].upper()))
            pending = None
        elif fields[0] == "sub":
            pending = None
    return found
