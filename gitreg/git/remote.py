"""git against Git hosts: a repository's tags (`ls-remote`, no clone) and fetches into gitreg's
repositories. Every process starts in `runner`; what a failure means is `failures`' to say.

`ls-remote` output is read line by line and refused beyond MAX_REFS tags or MAX_OUTPUT_BYTES,
instead of being read whole into memory first: a host advertising millions of tags cannot
exhaust the server's memory.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from gitreg.core.errors import UpstreamUnavailable
from gitreg.core.urls import mask
from gitreg.git.failures import check
from gitreg.git.runner import MAX_OUTPUT_BYTES, GitRunner

# A commit (or any object) name as git prints it: SHA-1, or SHA-256 in a repository that uses it.
SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Bounds on one `ls-remote` answer: beyond either, git is killed and the repository refused.
# 200,000 tag lines (an annotated tag takes two) or 32 MiB: far above real repositories.
MAX_REFS = 200_000
_MAX_LINE = 64 * 1024  # git's pkt-line limit is 65520 bytes: no ref line is longer
# Annotated tags' own object names remembered from recent ls-remotes (see TagObjects): at most
# this many tags in all (about 150 bytes each: 8 MiB), the repositories listed longest ago
# forgotten first. 2,500 repositories of 20 annotated tags each.
MAX_TAG_OBJECTS = 50_000


@dataclass(frozen=True)
class TagList:
    """The tags of one repository: tag name -> commit SHA (annotated tags peeled)."""

    tags: Mapping[str, str]
    # The commit the repository's HEAD (its default branch) names, listed in the same call; None
    # when the host advertised none (an empty repository, an unborn HEAD).
    head: str | None = field(default=None, compare=False)
    # Seconds the list had been fetched before this process got it (from another replica, via Redis).
    age: float = field(default=0.0, compare=False)


class TagObjects:
    """The object names of annotated tags (not their commits), as the latest `ls-remote` of each
    repository advertised them: a details fetch asks for the tag object by its name, so the tag
    keeps its tagger's date, without asking the host for its refs again. Bounded (MAX_TAG_OBJECTS);
    a tag forgotten, or one whose commit changed since, is fetched by its commit (the commit's date)."""

    def __init__(self, limit: int = MAX_TAG_OBJECTS) -> None:
        self._limit = limit
        self._size = 0
        # url -> tag -> its object's name then its commit's, as bytes (a third of the hex's memory)
        self._by_url: OrderedDict[str, dict[str, bytes]] = OrderedDict()
        self._lock = threading.Lock()  # ls-remote runs in the git pool's threads

    def keep(self, url: str, objects: dict[str, tuple[str, str]]) -> None:
        """Remember `url`'s annotated tags (tag -> (tag object, commit)), replacing what was known."""
        packed = {tag: bytes.fromhex(obj + commit) for tag, (obj, commit) in objects.items() if len(obj) == len(commit)}
        if len(packed) > self._limit:
            packed = {}
        with self._lock:
            old = self._by_url.pop(url, None)
            self._size -= len(old) if old else 0
            if packed:
                self._by_url[url] = packed
                self._size += len(packed)
            while self._size > self._limit:
                _, dropped = self._by_url.popitem(last=False)
                self._size -= len(dropped)

    def of(self, url: str) -> dict[str, tuple[str, str]]:
        """What is known of `url`'s annotated tags (for the index process: see index.protocol.TagsFetched)."""
        with self._lock:
            known = dict(self._by_url.get(url, {}))
        return {tag: _unpacked(both) for tag, both in known.items()}

    def want(self, url: str, tag: str, commit: str) -> str:
        """What to fetch for tag `tag` at `commit`: the tag object when the tag is annotated, else the commit."""
        with self._lock:
            both = self._by_url.get(url, {}).get(tag)
        if both is None:
            return commit
        obj, peeled = _unpacked(both)
        return obj if peeled == commit else commit


def _unpacked(both: bytes) -> tuple[str, str]:
    """(tag object, commit) from TagObjects' packed form."""
    half = len(both) // 2
    return both[:half].hex(), both[half:].hex()


class GitAdapter:
    """git calls that talk to a Git host, through `runner`, their failures classified."""

    def __init__(self, runner: GitRunner) -> None:
        self.runner = runner
        self.tag_objects = TagObjects()

    def call(self, args: list[str], url: str, cwd: str | None = None) -> str:
        """Run a git command that talks to `url` (e.g. a fetch); its stdout, bounded by MAX_OUTPUT_BYTES."""
        run, out = self.runner.output(args, url, cwd)
        check(self.runner, run, url, lambda shown: f"git wrote more than {MAX_OUTPUT_BYTES // 2**20} MiB for {shown}")
        return out.decode("utf-8", "replace")

    def ls_remote_tags(self, url: str) -> TagList:
        """List a repository's tags with `git ls-remote`; no clone is needed.

        The answer is read line by line: past MAX_REFS tag lines or MAX_OUTPUT_BYTES git is
        killed and the repository refused, before the rest is ever read.
        """
        parser = _RefParser(url)
        size = 0
        # HEAD and the tags in one listing: the default branch's commit says when its `.gitreg.toml`
        # must be read again (registry/declared.py). git matches these patterns at a ref's tail.
        with self.runner.spawn(["git", "ls-remote", "--end-of-options", url, "HEAD", "refs/tags/*"], url) as run:
            assert run.proc.stdout is not None
            while line := run.proc.stdout.readline(_MAX_LINE):
                size += len(line)
                if size > MAX_OUTPUT_BYTES or parser.lines >= MAX_REFS:
                    run.kill("too_large")
                    break
                parser.feed(line)
        check(
            self.runner,
            run,
            url,
            lambda shown: (
                f"{shown} has more than {MAX_REFS} tags (or {MAX_OUTPUT_BYTES // 2**20} MiB "
                "of tag refs); gitreg refuses to read them all"
            ),
        )
        tags = parser.result()
        self.tag_objects.keep(url, parser.objects(tags))
        return TagList(tags, head=parser.head)


class _RefParser:
    """Incremental `git ls-remote --tags` parser; peeled `^{}` lines win for annotated tags."""

    def __init__(self, url: str = "") -> None:
        self.url = url
        self.lines = 0
        self._tags: dict[str, str] = {}
        self._peeled: dict[str, str] = {}
        self._objects: dict[str, str] = {}  # annotated tag -> its tag object (result() fills it)
        self.head: str | None = None

    def feed(self, raw: bytes | str) -> None:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        self.lines += 1
        sha, sep, ref = line.partition("\t")
        if sep and SHA_RE.fullmatch(sha) and (ref == "HEAD" or ref.endswith("/HEAD")):
            if ref == "HEAD":  # not another ref ending in /HEAD (refs/remotes/origin/HEAD)
                self.head = sha
            if not ref.startswith("refs/tags/"):
                return
        if not sep or not SHA_RE.fullmatch(sha) or not ref.startswith("refs/tags/"):
            if line.strip():
                raise UpstreamUnavailable(
                    f"the Git host answered something that is not a ref list for {mask(self.url)}"
                )
            return
        name = ref[len("refs/tags/") :]
        if name.endswith("^{}"):
            self._peeled[name[:-3]] = sha
        else:
            self._tags[name] = sha

    def result(self) -> dict[str, str]:
        tags = self._tags
        self._objects = {name: tags[name] for name in self._peeled if name in tags}
        tags.update((name, sha) for name, sha in self._peeled.items() if name in tags)
        return tags

    def objects(self, tags: Mapping[str, str]) -> dict[str, tuple[str, str]]:
        """After result(): annotated tag -> (its tag object, its commit)."""
        return {name: (obj, tags[name]) for name, obj in self._objects.items()}
