"""The `.tf` files of a repository's default branch, read shallowly ("Used by": gitreg/usage/scan.py).

One scratch bare repository per read, removed after it: `git clone --bare --depth=1` of the
remote's HEAD branch with `--filter=blob:limit=...` (a host that honours filters sends no blob larger
than a `.tf` file gitreg would read; one that does not sends them all, still one commit deep),
then two local commands: `rev-list --objects --missing=print` (every path, and which blobs the
filter left out, without fetching them: `cat-file` on a missing blob of a partial fetch would
fetch it), and one `cat-file --batch` of the `.tf` blobs kept, within a file count and a total.

Repository content is hostile: sizes and counts are bounded here, before anything is parsed.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field

from gitreg.core.errors import UpstreamUnavailable
from gitreg.git.mirror import MirrorGit
from gitreg.git.remote import SHA_RE

MAX_TF_FILE_BYTES = 256 * 1024  # a larger .tf file is not read (the fetch's blob filter)
MAX_TF_FILES = 1000  # .tf files read from one repository
MAX_TF_TOTAL_BYTES = 16 * 1024 * 1024  # of .tf files read from one repository


@dataclass
class BranchFiles:
    """A default branch's commit and its `.tf` files (path -> bytes), with what was left out."""

    commit: str
    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class ShallowReader(MirrorGit):
    """Reads default branches for the usage scan; blocking, for the git pool's threads.

    A MirrorGit: its scratch repositories are gitreg's own, made and read the same way.
    """

    def head(self, url: str) -> str:
        """The commit the remote's HEAD (its default branch) names: one `ls-remote`; "" when it has none."""
        out = self.adapter.call(["git", "ls-remote", "--end-of-options", url, "HEAD"], url)
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name == "HEAD" and SHA_RE.fullmatch(sha):
                return sha
        return ""

    def read(self, scratch: str, url: str) -> BranchFiles:
        """The `.tf` files of `url`'s default branch, cloned into a new repository under `scratch`."""
        with tempfile.TemporaryDirectory(dir=scratch, prefix="scan-") as path:
            # One process for what `init` and `fetch` would take two: a bare clone of HEAD's branch
            # alone (`--depth` implies `--single-branch`), without the template's hooks.
            options = ["--quiet", "--bare", "--template=", "--depth=1", "--no-tags"]
            clone = ["git", "-c", "fetch.unpackLimit=1", "clone", *options, f"--filter=blob:limit={MAX_TF_FILE_BYTES}"]
            self.adapter.call([*clone, "--end-of-options", url, path], url)
            return self._files(path)

    def _files(self, path: str) -> BranchFiles:
        # Every object of the commit, the commit first; `?<sha>` for what the blob filter left out.
        status, listing = self._local(path, ["rev-list", "--objects", "--missing=print", "HEAD"], 120)
        commit = listing.split("\n", 1)[0].strip()
        if status != 0 or not SHA_RE.fullmatch(commit):
            status, _ = self._local(path, ["rev-parse", "--verify", "--quiet", "HEAD"], 60)
            if status != 0:
                return BranchFiles("")  # an empty repository: no commit on its default branch yet
            raise UpstreamUnavailable("could not list the files of the cloned default branch")
        found = BranchFiles(commit)
        wanted: list[tuple[str, str]] = []
        for line in listing.splitlines():
            sha, _, name = line.partition(" ")
            if not name.endswith(".tf") or ".terraform/" in f"/{name}":
                continue
            if len(wanted) >= MAX_TF_FILES:
                found.notes.append(f"more than {MAX_TF_FILES} .tf files; the rest are not read")
                break
            wanted.append((sha, name))
        missing = sum(1 for line in listing.splitlines() if line.startswith("?"))
        if missing:
            found.notes.append(f"{missing} file(s) larger than {MAX_TF_FILE_BYTES} bytes not read")
        if wanted:
            self._cat(path, wanted, found)
        return found

    def _cat(self, path: str, wanted: list[tuple[str, str]], found: BranchFiles) -> None:
        with tempfile.TemporaryFile() as stdin:
            stdin.write("".join(f"{sha}\n" for sha, _ in wanted).encode())
            stdin.seek(0)
            run, out = self.adapter.runner.output(
                ["git", "cat-file", "--batch"], "", cwd=path, timeout=120, stdin=stdin
            )
        if run.killed is not None or run.proc.returncode != 0:
            raise UpstreamUnavailable("could not read the .tf files of the fetched default branch")
        total, offset = 0, 0
        for _, name in wanted:
            end = out.find(b"\n", offset)
            if end < 0:
                break
            header = out[offset:end].split()
            offset = end + 1
            if len(header) != 3:  # "<sha> missing": nothing follows
                continue
            size = int(header[2])
            body, offset = out[offset : offset + size], offset + size + 1
            if header[1] != b"blob":
                continue
            if size > MAX_TF_FILE_BYTES:  # a host that ignored the blob filter sent it anyway
                found.notes.append(f"{name}: larger than {MAX_TF_FILE_BYTES} bytes; not read")
                continue
            total += size
            if total > MAX_TF_TOTAL_BYTES:
                found.notes.append(f"more than {MAX_TF_TOTAL_BYTES} bytes of .tf files; the rest are not read")
                return
            found.files[name] = body
