"""A provider package's `h1:` hash: Go modules' dirhash Hash1, as Terraform computes it.

For every file entry of the zip, sorted by name (byte-wise), the line `<hex sha256>  <name>\n`;
`h1:` + base64 of the SHA-256 of those lines. Directory entries count in Terraform's zip form
but not in the form it computes after unpacking; goreleaser's zips hold none, and a zip that does
is refused here rather than given an `h1:` the installed package would not match.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from typing import BinaryIO

CHUNK = 1024 * 1024


class HashError(Exception):
    """The zip cannot be hashed (not a zip, a directory entry, a name with a newline)."""


def h1_of_zip(file: BinaryIO) -> str:
    """The `h1:` hash of the zip in `file` (blocking: run it on a worker thread)."""
    try:
        with zipfile.ZipFile(file) as z:
            lines = []
            for info in sorted(z.infolist(), key=lambda i: i.filename.encode()):
                if info.is_dir():
                    raise HashError(f"the zip holds a directory entry {info.filename!r}")
                if "\n" in info.filename:
                    raise HashError("a zip entry's name holds a newline")
                digest = hashlib.sha256()
                with z.open(info) as entry:
                    while chunk := entry.read(CHUNK):
                        digest.update(chunk)
                lines.append(f"{digest.hexdigest()}  {info.filename}\n")
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise HashError(f"not a readable zip: {e}") from None
    return "h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode()


def h1_request(request: dict[str, str]) -> dict[str, str]:
    """h1_of_zip() as a parse worker runs it (index.parse_workers' handler): the zip at
    `request["path"]`; `{"h1": ...}`, or `{"error": why}` when it cannot be hashed."""
    try:
        with open(request["path"], "rb") as f:
            return {"h1": h1_of_zip(f)}
    except HashError as e:
        return {"error": str(e)}
    except OSError as e:
        return {"error": f"cannot read the zip: {e.strerror}"}
