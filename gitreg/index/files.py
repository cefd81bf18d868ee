"""The images of a module's folder at one commit, for the pages' files endpoint (a README's diagrams).

Read the way details are (details.py): from gitreg's mirror of the repository, or a shallow
fetch of the one tag, with `git archive <sha>:<folder>` in the git pool; only a SHA from
ls-remote reaches git. One archive serves every image of that commit: the first image a page
asks for reads them all (each up to MAX_IMAGE_BYTES, MAX_COMMIT_BYTES in all), the page's other
images come from memory. A commit's files never change, so they are remembered (LRU, bounded
in bytes) and concurrent asks share one read.

Memory: CACHE_BYTES of images kept, plus the one commit being read (commits are read one at a
time: MAX_COMMIT_BYTES at most), so 64 MiB of images in all, however many pages load at once.
Each image lives in its own anonymous mapping, filled in pieces: freed, its memory goes back to
the system at once (5 MB `bytes` made and dropped by the git pool's threads stayed in malloc's
arenas: 8 pages of 6 such images at once left the process 70-200 MiB larger, issue 33).

An image is what its extension says AND what its first bytes say (PNG, JPEG, GIF, WebP, SVG);
anything else is not served, whatever it is called.
"""

from __future__ import annotations

import asyncio
import mmap
import posixpath
import tarfile
from collections import OrderedDict
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from gitreg.core.errors import GitregError, UpstreamUnavailable
from gitreg.core.flight import InFlight

if TYPE_CHECKING:
    from gitreg.config.rules import ResolvedModule
    from gitreg.core.versions import TaggedVersion
    from gitreg.git.mirror import MirrorGit
    from gitreg.git.pool import GitPool
    from gitreg.storage.mirrors import MirrorStore

MAX_IMAGE_BYTES = 5 << 20
MAX_COMMIT_BYTES = 32 << 20  # of one commit's images kept (the rest answer 404 until read alone)
CACHE_BYTES = 32 << 20  # of images read before; with the commit being read, 64 MiB at most
READ_PIECE = 64 << 10  # an image is copied into its mapping this many bytes at a time
MAX_PATH = 1024
IMAGE_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "svg": "image/svg+xml",
}


class NotAnImage(GitregError):
    """No image at that path (no such file, another kind of file, or a path that leaves the folder)."""

    status = 404


class ImageTooLarge(GitregError):
    """The image is larger than the files endpoint serves."""

    status = 413


def image_type(path: str) -> str | None:
    """The Content-Type an image path is served with, or None when its name is not an image's."""
    return IMAGE_TYPES.get(path.rpartition(".")[2].lower()) if "." in path else None


def checked_path(path: str) -> str:
    """A path inside the module's folder, as asked for: NotAnImage for `..`, `.`, empty segments,
    an absolute path, a backslash or an unprintable character, or a name that is not an image's."""
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH
        or not path.isprintable()
        or "\\" in path
        or any(p in ("", ".", "..") for p in parts)
        or image_type(path) is None
    ):
        raise NotAnImage(f"no image at {path[:200]!r}")
    return path


# An image's bytes, read-only (a view of its own mapping, or of bytes).
Image = memoryview


def sniffed(image: bytes | Image, content_type: str) -> bool:
    """Whether `image` starts as a file of `content_type` does (the extension alone proves nothing)."""
    data = bytes(image[:4096])
    if content_type == "image/png":
        return data.startswith(b"\x89PNG\r\n\x1a\n")
    if content_type == "image/jpeg":
        return data.startswith(b"\xff\xd8\xff")
    if content_type == "image/gif":
        return data.startswith((b"GIF87a", b"GIF89a"))
    if content_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    if content_type == "image/svg+xml":
        head = data[:4096].removeprefix(b"\xef\xbb\xbf").lstrip()
        return head.startswith((b"<?xml", b"<svg", b"<!--", b"<!DOCTYPE svg")) and b"<svg" in head
    return False


def read_images(stream: BinaryIO) -> dict[str, Image | None]:
    """The image files of a `git archive` tar stream by path (None: larger than MAX_IMAGE_BYTES), read as git
    writes it; past MAX_COMMIT_BYTES in all, the rest are left out."""
    found: dict[str, Image | None] = {}
    kept = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                if not member.isfile() or image_type(member.name) is None:
                    continue
                name = posixpath.normpath(member.name)
                if member.size > MAX_IMAGE_BYTES:
                    found[name] = None
                    continue
                handle = tar.extractfile(member) if kept + member.size <= MAX_COMMIT_BYTES else None
                if handle is not None:
                    found[name] = _mapped(handle, member.size)
                    kept += member.size
    except (tarfile.TarError, EOFError):
        pass  # what was read so far is served; the rest answers 404
    return found


def _mapped(handle: IO[bytes], size: int) -> Image:
    """The `size` bytes of `handle` in an anonymous mapping of their own, read READ_PIECE at a time."""
    if size == 0:
        return memoryview(b"")
    mapping = mmap.mmap(-1, size)
    done = 0
    while done < size and (piece := handle.read(min(READ_PIECE, size - done))):
        mapping[done : done + len(piece)] = piece
        done += len(piece)
    return memoryview(mapping).toreadonly()[:done]


def read_commit_images(git: MirrorGit, mirror: str, sha: str, folder: str) -> dict[str, Image | None]:
    """Blocking: the images below `folder` at commit `sha` of the repository at `mirror` (in the git pool)."""
    from gitreg.git.mirror import NoSuchTree  # here: as details.read_commit

    try:
        return git.archive(mirror, sha, folder.strip("/"), read_images)
    except NoSuchTree:
        return {}


class ModuleFiles:
    """Images of module folders at commits, read through the git pool, remembered per commit."""

    def __init__(self, mirrors: MirrorStore, git: MirrorGit, pool: GitPool, cache_bytes: int = CACHE_BYTES) -> None:
        self.mirrors = mirrors
        self.git = git
        self.pool = pool
        self.cache_bytes = cache_bytes
        self.reads = 0  # archives read (tests)
        self._done: OrderedDict[tuple[str, str, str], dict[str, Image | None]] = OrderedDict()
        self._bytes = 0
        self._inflight: InFlight[tuple[str, str, str], dict[str, Image | None]] = InFlight(self._finished)
        self._reading = asyncio.Semaphore(1)  # one commit's images in memory being read at a time

    async def image(self, resolved: ResolvedModule, tagged: TaggedVersion, path: str) -> tuple[Image, str]:
        """(the image's bytes, its Content-Type) at `path` in the module's folder at `tagged`'s commit.

        NotAnImage (404) or ImageTooLarge (413); GitregError when the repository cannot be read.
        """
        content_type = image_type(checked_path(path)) or ""
        key = (resolved.repository, resolved.rule.path.strip("/"), tagged.sha)
        images = self._done.get(key)
        if images is None:
            future = self._inflight.join(key, lambda: self._read(resolved, tagged))
            images = await self._inflight.wait(future)
        else:
            self._done.move_to_end(key)
        data = images.get(path)
        if data is None and path in images:
            raise ImageTooLarge(f"{path[:200]} is larger than {MAX_IMAGE_BYTES >> 20} MiB")
        if data is None or not sniffed(data, content_type):
            raise NotAnImage(f"no image at {path[:200]!r}")
        return data, content_type

    async def _read(self, resolved: ResolvedModule, tagged: TaggedVersion) -> dict[str, Image | None]:
        from gitreg.core.urls import origin_label

        self.reads += 1
        async with self._reading, self.mirrors.snapshot(resolved.repository, tagged.tag, tagged.sha) as mirror:
            found: Any = await self.pool.run(
                read_commit_images,
                self.git,
                str(mirror),
                tagged.sha,
                resolved.rule.path,
                host=origin_label(resolved.repository),
            )
        if not isinstance(found, dict):
            raise UpstreamUnavailable("could not read the module's files")
        return found

    def _finished(self, key: tuple[str, str, str], future: asyncio.Future[dict[str, Image | None]]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        images = future.result()
        self._done[key] = images
        self._bytes += _size(images)
        while self._done and self._bytes > self.cache_bytes and len(self._done) > 1:
            _, dropped = self._done.popitem(last=False)
            self._bytes -= _size(dropped)


def _size(images: dict[str, Image | None]) -> int:
    return sum(len(data) for data in images.values() if data is not None)
