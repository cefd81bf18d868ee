"""The README of a provider release's tag, for its page: read with git through gitreg's mirrors.

A release names a tag; its commit comes from the repository's tag list (the registry's tag cache,
handed in by the composition root: `tag_shas`), and the README at that commit from gitreg's
mirror of the repository, or a shallow fetch of that one tag (storage.mirrors' `snapshot`), with
`git archive` in the git pool at the pages' priority (BROWSE), as a module's details are read.
Only a SHA from ls-remote reaches git. A commit's README never changes: remembered per commit
(LRU). The page renders it as module READMEs are (web/pages/readme.py: parse workers, nh3).
"""

from __future__ import annotations

import logging
import tarfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import BinaryIO

from gitreg.core.errors import GitregError
from gitreg.core.flight import InFlight
from gitreg.core.urls import origin_label
from gitreg.git.mirror import MirrorGit, NoSuchTree
from gitreg.git.pool import GitPool, Priority
from gitreg.storage.mirrors import MirrorStore

log = logging.getLogger(__name__)

MAX_README_BYTES = 1 << 20  # as module READMEs: a larger one is not shown
REMEMBERED = 256
# The names tried at the repository's root, best first (case-insensitive).
NAMES = ("readme.md", "readme.markdown", "readme")

TagShas = Callable[[str], Awaitable[Mapping[str, str]]]


def read_readme(stream: BinaryIO) -> str:
    """Blocking: the root README of a `git archive` tar stream ("" for none), the stream read to its end."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                name = member.name.lower()
                if member.isfile() and name in NAMES and member.size <= MAX_README_BYTES:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        found[name] = handle.read()
    except (tarfile.TarError, EOFError):
        pass
    best = next((found[n] for n in NAMES if n in found), b"")
    return best.decode("utf-8", errors="replace")


def read_at(git: MirrorGit, mirror: str, sha: str) -> str:
    """Blocking (in the git pool): the root README at commit `sha` of the repository at `mirror`."""
    try:
        return git.archive(mirror, sha, "", read_readme)
    except NoSuchTree:
        return ""


class ReleaseReadmes:
    """READMEs at release tags, read through the git pool at BROWSE priority and remembered per commit."""

    def __init__(self, tag_shas: TagShas, mirrors: MirrorStore, git: MirrorGit, pool: GitPool) -> None:
        self._tag_shas = tag_shas
        self._mirrors = mirrors
        self._git = git
        self._pool = pool
        self._done: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._reading: InFlight[tuple[str, str], str] = InFlight()
        self.reads = 0  # commits read with git (tests)

    async def at_tag(self, clone_url: str, tag: str) -> tuple[str, str] | None:
        """(the README's Markdown, the commit) at `tag` of `clone_url`; None when the tag or the
        repository cannot be read (the page then shows none)."""
        try:
            sha = (await self._tag_shas(clone_url)).get(tag)
        except GitregError as e:
            log.info("no README for a provider release: %s", e.message)
            return None
        if sha is None:
            return None
        key = (clone_url, sha)
        found = self._done.get(key)
        if found is None:
            try:
                found = await InFlight.wait(self._reading.join(key, lambda: self._read(clone_url, tag, sha)))
            except GitregError as e:
                log.info("no README for a provider release: %s", e.message)
                return None
        return found, sha

    async def _read(self, url: str, tag: str, sha: str) -> str:
        self.reads += 1
        async with self._mirrors.snapshot(url, tag, sha) as mirror:
            text: str = await self._pool.run(
                read_at, self._git, str(mirror), sha, host=origin_label(url), priority=Priority.BROWSE
            )
        self._done[(url, sha)] = text
        while len(self._done) > REMEMBERED:
            self._done.popitem(last=False)
        return text
