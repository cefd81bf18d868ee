"""Real bare Git repositories built in a temporary directory, with real tags."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "HOME": str(home),
        "GIT_TERMINAL_PROMPT": "0",
    }


class GitRepo:
    """A bare repository plus a scratch work tree, both under a base dir."""

    def __init__(self, base: Path, name: str) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.bare = base / f"{name}.git"
        self.work = base / f"{name}-work"
        self.url = self.bare.as_uri()
        self._env = _env(base)
        subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(self.bare)], check=True, env=self._env)
        subprocess.run(["git", "init", "--quiet", "-b", "main", str(self.work)], check=True, env=self._env)
        self.git("remote", "add", "origin", str(self.bare))

    def git(self, *args: str, env: dict[str, str] | None = None) -> str:
        """Run git in the work tree (with `env` added to its environment) and return its stdout."""
        result = subprocess.run(
            ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
            cwd=self.work,
            env={**self._env, **(env or {})},
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed: {result.stderr}")
        return result.stdout.strip()

    def commit(self, files: dict[str, str | None], message: str = "change", date: str | None = None) -> str:
        """Write (or, for None, delete) files, commit (dated `date`, ISO 8601, when given), push main
        to the bare repo; the commit SHA."""
        for rel, content in files.items():
            path = self.work / rel
            if content is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content)
        self.git("add", "-A")
        dated = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
        self.git("commit", "--quiet", "--allow-empty", "-m", message, env=dated)
        self.git("push", "--quiet", "origin", "main")
        return self.head()

    def tag(self, name: str, sha: str | None = None, annotated: bool = False, message: str | None = None) -> str:
        """Create or move tag `name` (default at HEAD), push it; the commit SHA it points to."""
        target = sha or "HEAD"
        if annotated:
            self.git("tag", "--force", "-a", "-m", message or name, name, target)
        else:
            self.git("tag", "--force", name, target)
        self.git("push", "--quiet", "--force", "origin", f"refs/tags/{name}")
        return self.git("rev-parse", f"{name}^{{commit}}")

    def delete_tag(self, name: str) -> None:
        """Delete a tag here and in the bare repository."""
        self.git("tag", "-d", name)
        self.git("push", "--quiet", "origin", f":refs/tags/{name}")

    def head(self) -> str:
        """The SHA of HEAD."""
        return self.git("rev-parse", "HEAD")
