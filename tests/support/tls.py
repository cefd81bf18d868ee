"""A throwaway certificate authority for TLS tests (trustme)."""

from __future__ import annotations

from pathlib import Path

import trustme


def write_tls_files(directory: Path, host: str = "127.0.0.1") -> trustme.CA:
    """`ca.pem`, and `cert.pem`/`key.pem` of a certificate for `host` it signed, in `directory`."""
    ca = trustme.CA()
    cert = ca.issue_cert(host)
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    cert.private_key_pem.write_to_path(str(directory / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    return ca
