"""`[signing]`: the keys that sign releases, and whether only signed versions are served.

`allowed_signers` is git's allowed-signers file (SSH keys, `gpg.ssh.allowedSignersFile`),
`openpgp_keys` a file of armored OpenPGP public keys; `require` the default of the
`require_signed` key of `[[modules]]` and `[[orgs]]`. The files are read here, at start (for
`gitreg check` as for `serve`): a missing or unreadable one is a config error naming its key.
"""

from __future__ import annotations

from gitreg.config.model import SigningConfig
from gitreg.config.reader import TableReader

ARMOR_HEADER = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
MAX_KEYS_BYTES = 1024 * 1024  # a few hundred keys are a few hundred KiB


def _read(r: TableReader, key: str, path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_KEYS_BYTES + 1)
    except OSError as e:
        r.error(key, f"cannot read {path!r}: {e.strerror}")
        return None
    if len(text) > MAX_KEYS_BYTES:
        r.error(key, f"{path!r} is larger than {MAX_KEYS_BYTES // 1024} KiB; not a key file")
        return None
    return text


def parse_signing(r: TableReader, required_anywhere: bool) -> SigningConfig:
    """`[signing]`; `required_anywhere`: some `[[modules]]`/`[[orgs]]` says require_signed = true."""
    allowed = r.str("allowed_signers")
    openpgp = r.str("openpgp_keys")
    require = r.bool("require", SigningConfig.require)
    if allowed is not None:
        text = _read(r, "allowed_signers", allowed)
        if text is not None and not any(
            line.strip() and not line.lstrip().startswith(b"#") for line in text.splitlines()
        ):
            r.error("allowed_signers", f"{allowed!r} lists no key (git's allowed-signers format: PRINCIPALS KEY)")
    if openpgp is not None:
        text = _read(r, "openpgp_keys", openpgp)
        if text is not None and ARMOR_HEADER not in text:
            r.error("openpgp_keys", f"{openpgp!r} holds no armored OpenPGP public key ({ARMOR_HEADER.decode()})")
    if (require or required_anywhere) and allowed is None and openpgp is None:
        r.error(
            "allowed_signers" if require else "",
            "signatures are required (require / require_signed = true) but no keys are configured: "
            "set [signing] allowed_signers or openpgp_keys",
        )
    r.finish()
    return SigningConfig(allowed_signers=allowed, openpgp_keys=openpgp, require=require)


def read_require_signed(r: TableReader) -> bool | None:
    """A `[[modules]]` or `[[orgs]]` entry's `require_signed` (None: [signing] require decides)."""
    if r.raw("require_signed", False) is None:
        return None
    return r.bool("require_signed", False)
