"""What a version's page and details say about where its bytes come from: the commit it serves, its
archive's sha256, and whether its tag moved.

- `commit`: the commit a client gets for the version now. Where gitreg pins it (archive mode,
  tarball templates, `ref = "commit"`) that is the commit first served (`TagPins`), unless
  `[git] allow_moved_tags`; with `ref = "tag"` and `download = "git"` clients resolve the tag
  themselves, so it is the commit the tag names.
- `archive_sha256`: the SHA-256 of the archive gitreg serves (archive mode) or would serve for
  that commit (`storage.archives`, content-addressed and reproducible). Not known until built:
  a page or details answer that finds it missing starts its build in the background, at the
  request's (browse) priority, and says null meanwhile; nothing on `terraform init`'s path
  builds one for a git or template mode module. A build that fails (submodules, too large) is
  not tried again for a while, and never turns the answer into an error.
- `moved`: the tag names another commit than the one first served (`storage.moved`), noticed
  by a download (`TagPins.on_moved`) or here, by the pin differing from the commit the index
  read for the tag.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from gitreg.config.model import Config
from gitreg.core.content import ContentKey
from gitreg.core.names import ModuleAddress
from gitreg.registry.service import Registry
from gitreg.storage.archives import ArchiveStore
from gitreg.storage.moved import MovedTag, MovedTags
from gitreg.storage.pins import TagPins

log = logging.getLogger(__name__)

# A lazy build that failed is tried again after this long (its reason is logged by the store).
RETRY_FAILED_SECONDS = 600.0
MAX_FAILED = 4096


@dataclass(frozen=True)
class Provenance:
    """The commit a version serves, its archive's SHA-256 (None until known) and its tag's move (None if none)."""

    commit: str
    archive_sha256: str | None
    moved: MovedTag | None

    def to_json(self) -> dict[str, Any]:
        """The version details API's fields."""
        return {
            "commit": self.commit,
            "archive_sha256": self.archive_sha256,
            "moved": self.moved.to_json() if self.moved is not None else None,
        }


class Provenances:
    """Answers `Provenance` for the pages and the details API; never git on the caller's path."""

    def __init__(
        self, config: Config, registry: Registry, pins: TagPins, moved: MovedTags, archives: ArchiveStore
    ) -> None:
        self.allow_moved = config.git.allow_moved_tags
        self.registry = registry
        self.pins = pins
        self.moved = moved
        self.archives = archives
        self._failed: dict[ContentKey, float] = {}  # key -> when its build may be tried again (monotonic)
        self._building: set[ContentKey] = set()

    def noticed_by_download(self, repository: str, tag: str, first: str, current: str) -> None:
        """TagPins.on_moved's listener: a download found `tag` moved."""
        self.moved.notice(repository, tag, first, current)

    async def of(self, address: ModuleAddress, tag: str, sha: str) -> Provenance:
        """The provenance of the version of `address` tagged `tag`, whose tag names `sha` (the index's read)."""
        resolved = self.registry.resolve(address)
        rule = resolved.rule
        repository = resolved.repository
        pinned = self.pins.pinned(repository, tag)
        moved = self.moved.get(repository, tag)
        if pinned is not None and pinned != sha:
            moved = self.moved.notice(repository, tag, pinned, sha)
        follows_tag = rule.download == "git" and rule.ref == "tag"
        commit = sha if follows_tag or self.allow_moved or pinned is None else pinned
        return Provenance(commit, await self._checksum(ContentKey(repository, rule.path, commit)), moved)

    async def _checksum(self, key: ContentKey) -> str | None:
        """The archive's SHA-256 when built; else its build started in the background and None."""
        if self.archives.cached(key) is not None:
            return await self.archives.checksum(key)
        if key not in self._building and self._failed.get(key, 0.0) <= time.monotonic():
            self._failed.pop(key, None)
            self._building.add(key)
            # Started from this request's context: the build runs at its (browse) git priority.
            self.archives.start(key).add_done_callback(lambda task: self._built(key, task))
        return None

    def _built(self, key: ContentKey, task: asyncio.Future[Any]) -> None:
        self._building.discard(key)
        if task.cancelled() or task.exception() is not None:  # logged by the archive store
            if len(self._failed) >= MAX_FAILED:
                self._failed.pop(next(iter(self._failed)))
            self._failed[key] = time.monotonic() + RETRY_FAILED_SECONDS
