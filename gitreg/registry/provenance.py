"""What a version's page and details say about where its bytes come from: the commit it serves, its
archive's sha256, and whether its tag moved.

- `commit`: the commit a client gets for the version now. Where gitreg pins it (archive mode,
  tarball templates, `ref = "commit"`) that is the commit first served (`TagPins`), unless
  `[git] allow_moved_tags`; with `ref = "tag"` and `download = "git"` clients resolve the tag
  themselves, so it is the commit the tag names.
- `archive_sha256`: the SHA-256 of the archive gitreg serves (archive mode) or would serve for
  that commit (`storage.archives`, content-addressed and reproducible): the archive store's, once
  built, else what the details read hashed from the very `git archive` it runs (the index, in the
  background: `index.tree.read_commit`). No build, no fetch on this path, and none on
  `terraform init`'s for a git or template mode module; None until known (details not read yet,
  details files from before this was kept, a module with submodules).
- `moved`: the tag names another commit than the one first served (`storage.moved`), noticed
  by a download (`TagPins.on_moved`) or here, by the pin (this replica's, else the one another
  replica recorded in Redis) differing from the commit the index read for the tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitreg.config.model import Config
from gitreg.core.content import ContentKey
from gitreg.core.names import ModuleAddress
from gitreg.registry.service import Registry
from gitreg.replicas.base import SharedState
from gitreg.storage.archives import ArchiveStore
from gitreg.storage.moved import MovedTag, MovedTags
from gitreg.storage.pins import TagPins


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
        self,
        config: Config,
        registry: Registry,
        pins: TagPins,
        shared: SharedState,
        moved: MovedTags,
        archives: ArchiveStore,
    ) -> None:
        self.allow_moved = config.git.allow_moved_tags
        self.registry = registry
        self.pins = pins
        self.shared = shared
        self.moved = moved
        self.archives = archives

    def noticed_by_download(self, repository: str, tag: str, first: str, current: str) -> None:
        """TagPins.on_moved's listener: a download found `tag` moved."""
        self.moved.notice(repository, tag, first, current)

    async def of(self, address: ModuleAddress, tag: str, sha: str, read_sha256: str | None) -> Provenance:
        """The provenance of the version of `address` tagged `tag`, whose tag names `sha` (the index's
        read), and `read_sha256` the archive sha256 its details read found for `sha` (None: unknown)."""
        resolved = self.registry.resolve(address)
        rule = resolved.rule
        repository = resolved.repository
        pinned = self.pins.pinned(repository, tag)
        if pinned is None:  # another replica may have served it: its pin is in the shared store (Redis)
            shared = await self.shared.pinned(repository, tag)
            pinned = shared[0] if shared is not None else None
        moved = self.moved.get(repository, tag)
        if pinned is not None and pinned != sha:
            moved = self.moved.notice(repository, tag, pinned, sha)
        follows_tag = rule.download == "git" and rule.ref == "tag"
        commit = sha if follows_tag or self.allow_moved or pinned is None else pinned
        key = ContentKey(repository, rule.path, commit)
        digest = await self.archives.checksum(key) if self.archives.cached(key) is not None else None
        if digest is None and commit == sha:  # the details were read at `sha`: theirs is for another commit else
            digest = read_sha256
        return Provenance(commit, digest, moved)
