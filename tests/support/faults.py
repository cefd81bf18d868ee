"""A real `gitreg serve` against misbehaving Git hosts: its config, its git children."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp

from tests.support.repos import GitRepo


def tagged_repo(base: Path, name: str, *tags: str) -> GitRepo:
    """A bare repository `name.git` under `base` with a module and `tags` on one commit."""
    r = GitRepo(base, name)
    r.commit({"main.tf": 'output "hello" { value = "world" }\n', "README.md": f"# {name}\n\nThe {name} module.\n"})
    for tag in tags:
        r.tag(tag)
    return r


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process, None when it is gone or a zombie (already dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[1]), fields[0]) if fields[0] != "Z" else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def git_children(root: int) -> dict[int, str]:
    """pid -> command line of every live git process (and its ssh/curl helpers) under `root`."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            parents.setdefault(st[0], []).append(int(entry))
    found, todo = {}, list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(parents.get(pid, []))
        cmd = _cmdline(pid)
        if cmd.startswith(("git", "/usr/lib/git-core", "ssh")) or "git-remote-" in cmd or "upload-pack" in cmd:
            found[pid] = cmd
    return found


def alive(pids: object) -> set[int]:
    """The pids that still run (a zombie has finished)."""
    return {pid for pid in pids if _stat(pid) is not None}  # type: ignore[attr-defined]


async def eventually(check, what: str, seconds: float = 10.0) -> None:
    """Poll `check()` until it is true; fail naming `what` after `seconds` (a bound, not a timer)."""
    for _ in range(int(seconds / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not within {seconds}s: {what}")


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, dict]:
    async with session.get(url) as resp:
        return resp.status, await resp.json()
