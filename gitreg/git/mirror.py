"""git on gitreg's own bare repositories: mirrors and scratch repositories (archive mode,
module details, moved-tag pins). Every process starts in `runner`, as calls to Git hosts do:
timed, in its own process group, counted, killed at shutdown.

Moved tags: each commit gitreg pinned for a tag (`storage.pins`) has a ref in the mirror,
`refs/gitreg/pins/<sha>` (set_pin_refs). Fetches prune and force-update `refs/tags/*` only, so
a pinned commit stays reachable, and `git gc` keeps it, after its tag moved upstream.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Collection, Mapping
from typing import BinaryIO, TypeVar, cast

from gitreg.core.errors import DISK_FULL, DiskFull, UpstreamTimeout, UpstreamUnavailable
from gitreg.core.urls import mask
from gitreg.git.failures import DISK_FULL_TEXT, WantRefused, last_line
from gitreg.git.remote import SHA_RE, GitAdapter
from gitreg.git.runner import MAX_OUTPUT_BYTES, GitRun

T = TypeVar("T")
log = logging.getLogger(__name__)

PIN_REFS = "refs/gitreg/pins/"
# What out_of_space writes: more than git's small files (a config, a lock, a ref) take.
PROBE_BYTES = 64 * 1024


class NoSuchTree(Exception):
    """`git archive <sha>:<path>` found no such tree: the commit is not in the mirror, or has no such directory."""

    def __init__(self, sha: str, path: str, commit_missing: bool) -> None:
        super().__init__(f"{sha[:12]}:{path}")
        self.commit_missing = commit_missing


class MirrorGit:
    """Git commands on gitreg's own bare repositories; fetches go to the host through `adapter`."""

    def __init__(self, adapter: GitAdapter) -> None:
        self.adapter = adapter

    def _local(
        self,
        path: str | None,
        args: list[str],
        timeout: float | None = None,
        stdin: BinaryIO | None = None,
        writes: str | None = None,
    ) -> tuple[int, str]:
        """Run git on gitreg's own repository at `path` (no Git host involved): exit status and stdout.

        `writes`: the directory the command writes in; when it fails there and that directory has
        no room, a DiskFull, whatever git said.
        """
        run, out = self.adapter.runner.output(["git", *args], "", cwd=path, timeout=timeout, stdin=stdin)
        _raise_if_killed(run, f"git {args[0]}")
        if run.proc.returncode != 0 and (
            DISK_FULL_TEXT.search(run.error_text) or (writes is not None and out_of_space(writes))
        ):
            raise DiskFull(f"git {args[0]} could not write to gitreg's disk: no space left on device")
        return run.proc.returncode, out.decode("utf-8", "replace")

    def _checked(self, path: str, args: list[str], lines: list[str] | None = None) -> str:
        """Run git on the mirror at `path` (ref bookkeeping), `lines` on its stdin: its stdout.

        UpstreamUnavailable when git fails.
        """
        if lines is None:
            status, out = self._local(path, args, 60)
        else:
            with tempfile.TemporaryFile() as stdin:
                stdin.write("".join(f"{line}\n" for line in lines).encode())
                stdin.seek(0)
                status, out = self._local(path, args, 60, stdin, writes=path)
        if status != 0:
            raise UpstreamUnavailable(f"git {args[0]} on gitreg's mirror failed (exit {status})")
        return out

    def init(self, path: str) -> None:
        """Create an empty bare repository at `path`."""
        # Absolute: git runs in gitreg's own empty HOME, not in the server's working directory.
        # No template: none of the sample hooks, description and info/exclude a repository of
        # gitreg's never uses (a quarter of the files to write, and to remove after a scratch fetch).
        target = os.path.abspath(path)
        status, _ = self._local(
            None,
            ["init", "--quiet", "--bare", "--template=", "--end-of-options", target],
            timeout=60,
            writes=os.path.dirname(target),
        )
        if status != 0:
            raise UpstreamUnavailable(f"could not create a mirror repository (git init exited with {status})")

    def import_history(self, path: str, stream: bytes) -> None:
        """Write commits and tags into the repository at `path` from a `git fast-import` stream
        (`gitreg demo` builds its repository this way: no working tree, no user config)."""
        with tempfile.TemporaryFile() as stdin:
            stdin.write(stream)
            stdin.seek(0)
            status, _ = self._local(path, ["fast-import", "--quiet"], 60, stdin, writes=path)
        if status != 0:
            raise UpstreamUnavailable(f"git fast-import into {path} failed (exit {status})")

    def fetch_tags(self, path: str, url: str) -> None:
        """Fetch every tag of `url` into the repository at `path` (tags may move: force, prune)."""
        self._fetch(path, url, [], ["--force", "--prune"], "+refs/tags/*:refs/tags/*")

    def fetch_tag(self, path: str, url: str, tag: str, sha: str) -> None:
        """Fetch tag `tag` of `url` at commit `sha` into the repository at `path`, with that commit's
        tree only (`--depth=1`, no history): what module details need of a repository gitreg keeps
        no mirror of, and the tag's date (`tag_dates`).

        Asked for by object name, the one `ls-remote` gave (the tag object of an annotated tag,
        so its tagger's date comes along; else the commit): with protocol v2 git then sends no
        ref listing of its own, so the host advertises its refs once per repository, to
        `ls-remote`. A host that sends only advertised objects (protocol v0) is asked by the tag's
        name instead. The tag name comes from the host's ref list (a valid ref name: no `:` or `*`).
        """
        # The pack is kept as it came, not unpacked into a file per object (git does that
        # below 100 objects, which a module's tree usually is): read once, then removed.
        settings, options = ["-c", "fetch.unpackLimit=1"], ["--depth=1", "--no-tags"]
        want = self.adapter.tag_objects.want(url, tag, sha) if SHA_RE.fullmatch(sha) else ""
        if want:
            try:
                self._fetch(path, url, settings, options, f"+{want}:refs/tags/{tag}")
                return
            except WantRefused:
                log.info("%s sends only advertised objects: fetching tag %s by its name", mask(url), tag)
        self._fetch(path, url, settings, options, f"+refs/tags/{tag}:refs/tags/{tag}")

    def fetch_tag_dates(self, path: str, url: str, tags: Mapping[str, str]) -> dict[str, str]:
        """The dates of `tags` (tag -> commit SHA, as `ls-remote` gave them) of `url`, as `tag_dates`
        reads them: one fetch of their tag objects and commits, without history or trees
        (`--depth=1 --filter=tree:0`), into the scratch repository at `path`.

        Asked for by object name as in `fetch_tag` (no ref listing with protocol v2); a host that
        sends only advertised objects is asked by the tags' names.
        """
        settings = ["-c", "fetch.unpackLimit=1"]
        options = ["--depth=1", "--filter=tree:0", "--no-tags"]
        named = sorted(tag for tag, sha in tags.items() if SHA_RE.fullmatch(sha))
        wants = [f"+{self.adapter.tag_objects.want(url, tag, tags[tag])}:refs/tags/{tag}" for tag in named]
        try:
            self._fetch(path, url, settings, options, *wants)
        except WantRefused:
            log.info("%s sends only advertised objects: fetching its tags' dates by their names", mask(url))
            self._fetch(path, url, settings, options, *[f"+refs/tags/{tag}:refs/tags/{tag}" for tag in named])
        return self.tag_dates(path)

    def fetch_head(self, path: str, url: str, sha: str) -> None:
        """Fetch commit `sha` (HEAD's, as `ls-remote` gave it) of `url` with its tree only (`--depth=1`)
        into the repository at `path`, as `refs/gitreg/head`: what reading a file of the default
        branch needs. By object name (no ref listing with protocol v2); a host that sends only
        advertised objects is asked for its HEAD by name."""
        if not SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        settings, options = ["-c", "fetch.unpackLimit=1"], ["--depth=1", "--no-tags"]
        try:
            self._fetch(path, url, settings, options, f"+{sha}:refs/gitreg/head")
        except WantRefused:
            log.info("%s sends only advertised objects: fetching its HEAD by name", mask(url))
            self._fetch(path, url, settings, options, "+HEAD:refs/gitreg/head")

    def read_file(self, path: str, sha: str, file_path: str, limit: int) -> bytes | None:
        """The file `file_path` of commit `sha` in the repository at `path`: None when the commit has
        no such file (or it is not a file); ValueError when it is larger than `limit` bytes."""
        if not SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        found = self._checked(
            path, ["cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)"], [f"{sha}:{file_path}"]
        )
        parts = found.split()
        if len(parts) != 3 or parts[1] != "blob":
            return None
        if int(parts[2]) > limit:
            raise ValueError(f"{file_path} is {parts[2]} bytes, more than {limit}")
        run, out = self.adapter.runner.output(["git", "cat-file", "blob", parts[0]], "", cwd=path, timeout=30)
        _raise_if_killed(run, "git cat-file")
        if run.proc.returncode != 0:
            raise UpstreamUnavailable(f"could not read {file_path} of commit {sha[:12]} from gitreg's repository")
        return out

    def _fetch(self, path: str, url: str, settings: list[str], options: list[str], *refspecs: str) -> None:
        fetch = ["fetch", "--quiet", *options, "--no-write-fetch-head", "--end-of-options", url, *refspecs]
        try:
            self.adapter.call(["git", *settings, *fetch], url, path)
        except UpstreamUnavailable as e:
            if out_of_space(path):  # git's message did not say so (a lock or config file it could not write)
                raise DiskFull("git fetch could not write to gitreg's disk: no space left on device") from e
            raise

    def has_commit(self, path: str, sha: str) -> bool:
        """True when the mirror at `path` holds commit `sha` (a validated SHA from ls-remote)."""
        if not SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        status, _ = self._local(path, ["cat-file", "-e", f"{sha}^{{commit}}"], timeout=30)
        return status == 0

    def archive(self, path: str, sha: str, subdir: str, consume: Callable[[BinaryIO], T]) -> T:
        """`git archive --format=tar <sha>:<subdir>` of the mirror at `path`, read by `consume` as git writes it.

        The directory's files are at the root of the tar. Raises UpstreamTimeout, or
        UpstreamUnavailable (shutdown, git failed), or NoSuchTree: the caller says what that means.
        """
        if not SHA_RE.fullmatch(sha):
            raise ValueError("not a commit SHA")
        args = ["git", "archive", "--format=tar", "--end-of-options", f"{sha}:{subdir}"]
        with self.adapter.runner.spawn(args, "", cwd=path) as run:
            assert run.proc.stdout is not None
            # Popen(stdout=PIPE) in bytes mode: a BufferedReader, which typeshed calls IO[bytes].
            result = consume(cast(BinaryIO, run.proc.stdout))
        _raise_if_killed(run, f"git archive of commit {sha[:12]}")
        if run.proc.returncode != 0:
            if not self.has_commit(path, sha):
                raise NoSuchTree(sha, subdir, commit_missing=True)
            if "not a valid object name" in run.error_text or "not a tree object" in run.error_text:
                raise NoSuchTree(sha, subdir, commit_missing=False)
            raise UpstreamUnavailable(
                f"could not read commit {sha[:12]} from gitreg's mirror: {last_line(run.error_text)}"
            )
        return result

    def tag_dates(self, path: str) -> dict[str, str]:
        """tag name -> ISO 8601 date (the tagger's date, or the commit's for a lightweight tag)."""
        status, out = self._local(
            path, ["for-each-ref", "--format=%(refname:strip=2)%00%(creatordate:iso-strict)", "refs/tags"], timeout=60
        )
        if status != 0:
            raise UpstreamUnavailable(f"could not read the tag dates of gitreg's mirror (git exited with {status})")
        dates = {}
        for line in out.splitlines():
            name, _, date = line.partition("\0")
            if name and date:
                dates[name] = date
        return dates

    def set_pin_refs(self, path: str, commits: Collection[str]) -> None:
        """Give each pinned commit the mirror holds a ref `refs/gitreg/pins/<sha>`; drop refs no longer pinned.

        Three local git processes at most, whatever the number of pins (`for-each-ref`,
        `cat-file --batch-check`, one `update-ref --stdin` transaction). A pin whose commit the
        mirror does not hold (not fetched yet) gets its ref after a later fetch.
        """
        wanted = {sha for sha in commits if SHA_RE.fullmatch(sha)}
        out = self._checked(path, ["for-each-ref", "--format=%(refname)", PIN_REFS])
        have = {line[len(PIN_REFS) :] for line in out.splitlines() if line.startswith(PIN_REFS)}
        missing = sorted(wanted - have)
        present: list[str] = []
        if missing:
            found = self._checked(path, ["cat-file", "--batch-check=%(objectname) %(objecttype)"], missing)
            present = [line.split()[0] for line in found.splitlines() if line.endswith(" commit")]
        commands = [f"create {PIN_REFS}{sha} {sha}" for sha in present]
        commands += [f"delete {PIN_REFS}{name}" for name in sorted(have - wanted)]
        if commands:
            self._checked(path, ["update-ref", "--stdin"], commands)


def out_of_space(directory: str) -> bool:
    """Whether writing in `directory` fails for want of room (ENOSPC, EDQUOT).

    Asked after a git command that writes there failed: git does not always say why (`git init`
    with a few KiB left: "failed to write new configuration file .../config.lock", exit 128).
    """
    try:
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(bytes(PROBE_BYTES))
            probe.flush()
    except OSError as e:
        return e.errno in DISK_FULL
    return False


def _raise_if_killed(run: GitRun, what: str) -> None:
    """The error for a git run on gitreg's own repository that gitreg killed, if it was."""
    if run.killed == "timeout":
        raise UpstreamTimeout(f"{what} on gitreg's mirror took longer than [git] timeout_seconds")
    if run.killed == "too_large":
        raise UpstreamUnavailable(f"{what} wrote more than {MAX_OUTPUT_BYTES // 2**20} MiB")
    if run.killed is not None:
        raise UpstreamUnavailable("gitreg is shutting down; try again")
