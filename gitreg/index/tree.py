"""One module's files at one commit, as git gives them: `git archive` of the tag's commit, read in memory.

The repository holding the commit is a shallow fetch of the tag, or gitreg's mirror of the
repository when it keeps one (storage.mirrors.MirrorStore.snapshot); the archive is read with
tarfile, only the files details are made from (`.tf` files and READMEs of the module's
directory, its `modules/*` and `examples/*`), within size bounds. The tag's date comes from the
same repository (`git for-each-ref` after its one fetch): no request of its own.
"""

from __future__ import annotations

import io
import logging
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from gitreg.core.errors import UpstreamUnavailable
from gitreg.index.declarations import MAX_README_BYTES, MAX_TF_BYTES, README_NAMES

if TYPE_CHECKING:  # annotations only: the parse workers import this package and need none of git
    from gitreg.config.rules import ResolvedModule
    from gitreg.core.versions import TaggedVersion
    from gitreg.git.mirror import MirrorGit

log = logging.getLogger(__name__)

MAX_TREE_BYTES = 64 * 1024 * 1024  # of the `git archive` stream kept (the rest is discarded)
MAX_SUBMODULES = 200


def read_tree(stream: Any, base: str) -> tuple[dict[str, dict[str, bytes]], list[str]]:
    """Files we read from a tar stream: module dir ("" or "modules/x") -> {file name: bytes}."""
    dirs: dict[str, dict[str, bytes]] = {"": {}}
    notes: list[str] = []
    prefix = f"{base.strip('/')}/" if base.strip("/") else ""
    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            for member in tar:
                if not member.name.startswith(prefix):
                    continue
                rel = member.name[len(prefix) :].strip("/")
                parts = rel.split("/")
                if len(parts) == 1:
                    directory, fname = "", parts[0]
                elif len(parts) >= 2 and parts[0] in ("modules", "examples"):
                    directory = f"{parts[0]}/{parts[1]}"
                    if directory not in dirs:
                        if len(dirs) > MAX_SUBMODULES:
                            continue
                        dirs[directory] = {}
                    if len(parts) != 3:
                        continue
                    fname = parts[2]
                else:
                    continue
                if not member.isfile() or not (fname.endswith(".tf") or fname.lower() in README_NAMES):
                    continue
                if fname.endswith(".tf") and member.size > MAX_TF_BYTES:
                    shown = f"{directory}/{fname}" if directory else fname
                    notes.append(f"{shown}: larger than {MAX_TF_BYTES} bytes; its contents are not shown")
                    dirs[directory][fname] = b""  # still a .tf file: the module is not empty
                    continue
                handle = tar.extractfile(member)
                if handle is not None:
                    # One byte past the limit, so readme_of() can tell a README was truncated.
                    dirs[directory][fname] = handle.read(MAX_README_BYTES + 1 if not fname.endswith(".tf") else -1)
    except (tarfile.TarError, EOFError) as e:
        notes.append(f"the module tree could not be read completely ({e}); details may be incomplete")
    if len(dirs) > MAX_SUBMODULES:
        notes.append(f"more than {MAX_SUBMODULES} submodules; the rest are not shown")
    return dirs, notes


class _CappedWriter(io.RawIOBase):
    """Keeps the first `limit` bytes of a stream and drops the rest (git still runs to the end)."""

    def __init__(self, target: Any, limit: int) -> None:
        self.target = target
        self.left = limit
        self.truncated = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        if size > self.left:
            self.truncated = True
        if self.left > 0:
            kept = bytes(data[: self.left])
            self.target.write(kept)
            self.left -= len(kept)
        return size


@dataclass
class CommitTree:
    """What git gives for one module at one commit: the files we read per directory, notes, the tag date."""

    dirs: dict[str, dict[str, bytes]]
    notes: list[str]
    published_at: str = ""
    # The SHA-256 of the archive gitreg serves (or would serve) for this commit and path: hashed from
    # the same `git archive` output (storage.archives.archive_digest); None when the tree was too large
    # to keep whole here or holds submodules.
    archive_sha256: str | None = None


def read_commit(git: MirrorGit, mirror: str, resolved: ResolvedModule, tagged: TaggedVersion) -> CommitTree:
    """Blocking: archive the commit from the mirror and read its module files (runs in the git pool)."""
    from gitreg.git.mirror import NoSuchTree  # here: the parse workers import this module and need none of git

    base = resolved.rule.path.strip("/")
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
        writer = _CappedWriter(spool, MAX_TREE_BYTES)
        try:
            git.archive(mirror, tagged.sha, base, lambda tar: shutil.copyfileobj(tar, writer))
        except NoSuchTree as e:
            if e.commit_missing:
                raise UpstreamUnavailable(
                    f"commit {tagged.sha[:12]} of tag {tagged.tag!r} is not in what gitreg fetched "
                    "(did the tag move?); try again"
                ) from None
            # The rule's `path` is not in this commit: an empty module says so better than a 502.
            return CommitTree({"": {}}, [f"the path {base!r} does not exist at tag {tagged.tag!r}"])
        spool.seek(0)
        dirs, notes = read_tree(spool, "")  # `git archive <sha>:<path>`: the module's files are at the root
        archive_sha256 = None
        if not writer.truncated:
            from gitreg.storage.archives import archive_digest  # (as NoSuchTree above)

            spool.seek(0)
            archive_sha256 = archive_digest(cast(BinaryIO, spool))
    if writer.truncated:
        notes.append(f"the module tree is larger than {MAX_TREE_BYTES} bytes; details may be incomplete")
    published = ""
    try:
        published = utc_timestamp(git.tag_dates(mirror).get(tagged.tag, ""))
    except Exception as e:  # noqa: BLE001 - a date is nice to have, never worth failing the details
        log.warning("could not read the date of tag %s: %s", tagged.tag, type(e).__name__)
    return CommitTree(dirs, notes, published, archive_sha256)


def utc_timestamp(iso: str) -> str:
    """An ISO 8601 date with any offset as RFC 3339 UTC (`2026-01-02T03:04:05Z`); "" when unknown."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
