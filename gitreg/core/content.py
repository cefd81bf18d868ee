"""The content key: one directory of one commit of one repository, whose bytes never change.

Archives (`storage.archives`) and module details on disk (`index.persist`) are both keyed by
it, so each is built once per key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ContentKey:
    """What an archive or a details file holds: directory `path` of commit `sha` of `repository`."""

    repository: str
    path: str
    sha: str

    # Two file names from one key, hashed with different field orders and lengths: each is the
    # name its store has always written, so archives and details files from earlier versions
    # stay valid (changing either would make every existing file unreachable).
    @property
    def archive_name(self) -> str:
        """The archive's file name under the archives directory."""
        digest = hashlib.sha256(f"{self.repository}\0{self.sha}\0{self.path}".encode()).hexdigest()
        return f"{digest[:48]}.tar.gz"

    @property
    def details_name(self) -> str:
        """The details file's name under the index's details directory."""
        digest = hashlib.sha256(f"{self.repository}\0{self.path}\0{self.sha}".encode()).hexdigest()
        return f"{digest[:40]}.json"
