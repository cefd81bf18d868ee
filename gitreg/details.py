"""Module details read from a tagged tree: README, inputs, outputs, module calls, providers, resources.

The tree comes from gitreg's bare mirror (`git archive` of the tag's commit, read in memory
with tarfile); `.tf` files are parsed with python-hcl2, never by running Terraform. Details
depend only on the commit, so they are cached by (repository, path, tag, commit SHA) in a
bounded LRU. A file that does not parse is skipped with a note: the rest still shows.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import shutil
import tarfile
import tempfile
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import hcl2
from cachetools import LRUCache
from hcl2.utils import SerializationOptions

from .errors import GitregError, UpstreamUnavailable
from .git_adapter import MirrorGit, NoSuchTree
from .gitpool import GitPool, Priority, git_priority
from .urls import host_label as git_host
from .mirrors import MirrorStore
from .rules import ResolvedModule
from .versions import TaggedVersion

log = logging.getLogger(__name__)

# Plain Python values from python-hcl2: unquoted strings, no block markers, heredocs kept
# raw (its own heredoc-to-string conversion leaves escaped quotes behind; we dedent ourselves).
_HCL_OPTIONS = SerializationOptions(
    with_comments=False, explicit_blocks=False, preserve_heredocs=True, strip_string_quotes=True
)
# Limits that keep one odd repository from costing unbounded memory or CPU.
MAX_TREE_BYTES = 64 * 1024 * 1024  # of the `git archive` stream kept (the rest is discarded)
MAX_TF_BYTES = 512 * 1024  # per .tf file; larger files are skipped with a note
MAX_README_BYTES = 256 * 1024  # per README, truncated beyond
MAX_SUBMODULES = 200
MAX_DESCRIPTION = 300
CACHE_ENTRIES = 256

_README_NAMES = ("readme.md", "readme.markdown", "readme")
_HEREDOC_RE = re.compile(r"\A<<(-?)([A-Za-z_][A-Za-z0-9_-]*)\n(.*?)\n?[ \t]*\2\Z", re.DOTALL)
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class ModuleDetails:
    """What the details endpoints show about one module at one commit (JSON-ready parts)."""

    description: str
    published_at: str
    root: dict[str, Any]
    submodules: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)  # each `examples/*` directory


def hcl_text(value: Any) -> str:
    """A python-hcl2 value as display text: heredocs dedented, `${expr}` unwrapped."""
    if not isinstance(value, str):
        return "" if value is None else json.dumps(value)
    m = _HEREDOC_RE.match(value)
    if m:
        body = m.group(3)
        return textwrap.dedent(body) if m.group(1) else body
    if value.startswith("${") and value.endswith("}"):
        return value[2:-1]
    return value


def hcl_literal(value: Any) -> Any:
    """A python-hcl2 value as plain JSON data (numbers such as `-1.5e3` come back as `${...}`)."""
    if isinstance(value, dict):
        return {str(k): hcl_literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hcl_literal(v) for v in value]
    if isinstance(value, str):
        text = hcl_text(value)
        if value.startswith("${") and _NUMBER_RE.fullmatch(text):
            number = float(text)
            return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
        return text
    return value


def _blocks(parsed: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, body) of every `kind "label" {...}` block, in file order."""
    found = []
    for entry in parsed.get(kind, []) or []:
        if isinstance(entry, dict):
            for label, body in entry.items():
                found.append((str(label), body if isinstance(body, dict) else {}))
    return found


def _as_bool(value: Any) -> bool:
    return value is True or (isinstance(value, str) and hcl_text(value) == "true")


def analyze(files: dict[str, bytes], path: str) -> dict[str, Any]:
    """The details of one module directory from its files (name -> content, README and *.tf)."""
    notes: list[str] = []
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    dependencies: list[dict[str, Any]] = []
    resources: list[dict[str, Any]] = []
    providers: dict[str, dict[str, Any]] = {}
    readme = ""
    for candidate in _README_NAMES:
        name = next((n for n in files if n.lower() == candidate), None)
        if name is not None:
            raw = files[name]
            readme = raw[:MAX_README_BYTES].decode("utf-8", "replace")
            if len(raw) > MAX_README_BYTES:
                notes.append(f"{name}: longer than {MAX_README_BYTES} bytes; truncated")
            break
    tf_names = sorted(n for n in files if n.endswith(".tf"))
    shown = f"{path}/" if path else ""
    for name in tf_names:
        raw = files[name]
        if len(raw) > MAX_TF_BYTES:
            notes.append(f"{shown}{name}: larger than {MAX_TF_BYTES} bytes; its contents are not shown")
            continue
        try:
            parsed = hcl2.loads(raw.decode("utf-8"), serialization_options=_HCL_OPTIONS)
        except UnicodeDecodeError:
            notes.append(f"{shown}{name}: not UTF-8; skipped")
            continue
        except Exception as e:  # noqa: BLE001 - lark raises many kinds (and RecursionError on deep nesting)
            notes.append(f"{shown}{name}: could not be parsed ({_parse_error(e)}); its contents are not shown")
            continue
        for label, body in _blocks(parsed, "variable"):
            required = "default" not in body
            inputs.append({
                "name": label,
                "type": hcl_text(body["type"]) if "type" in body else "any",
                "description": hcl_text(body.get("description", "")),
                "default": "" if required else json.dumps(hcl_literal(body["default"]), ensure_ascii=False),
                "required": required,
                "sensitive": _as_bool(body.get("sensitive")),
            })
        for label, body in _blocks(parsed, "output"):
            outputs.append({
                "name": label,
                "description": hcl_text(body.get("description", "")),
                "sensitive": _as_bool(body.get("sensitive")),
            })
        for label, body in _blocks(parsed, "module"):
            dependencies.append({
                "name": label,
                "source": hcl_text(body.get("source", "")),
                "version": hcl_text(body.get("version", "")),
            })
        for rtype, body in _blocks(parsed, "resource"):
            for rname in body:
                resources.append({"name": str(rname), "type": rtype})
        for terraform in parsed.get("terraform", []) or []:
            if isinstance(terraform, dict):
                for block in terraform.get("required_providers", []) or []:
                    if isinstance(block, dict):
                        for pname, spec in block.items():
                            providers[str(pname)] = _provider(str(pname), spec)
    return {
        "path": path,
        "readme": readme,
        "empty": not tf_names,
        "inputs": inputs,
        "outputs": outputs,
        "dependencies": dependencies,
        "providers": [providers[k] for k in sorted(providers)],
        "resources": resources,
        "notes": notes,
    }


def _provider(name: str, spec: Any) -> dict[str, Any]:
    """One `required_providers` entry: `{source, version}` or a bare (legacy) version string."""
    if isinstance(spec, dict):
        source = hcl_text(spec.get("source", "")) or f"hashicorp/{name}"
        version = hcl_text(spec.get("version", ""))
    else:
        source, version = f"hashicorp/{name}", hcl_text(spec)
    parts = source.split("/")
    namespace = parts[-2] if len(parts) >= 2 else "hashicorp"
    return {"name": name, "namespace": namespace, "source": source, "version": version}


def _parse_error(e: Exception) -> str:
    line, column = getattr(e, "line", None), getattr(e, "column", None)
    if isinstance(line, int) and line > 0:
        return f"syntax error at line {line}, column {column}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return type(e).__name__


def description_from_readme(readme: str) -> str:
    """The README's first prose paragraph (no headings, badges, HTML or code), as one line."""
    paragraph: list[str] = []
    in_code = False
    for line in readme.splitlines():
        text = line.strip()
        if text.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        skip = (
            not text
            or text.startswith(("#", "<", "![", "[![", "---", "===", "|", ">"))
            or (text.startswith("[") and "]: " in text)  # a link reference definition
        )
        if skip:
            if paragraph:
                break
            continue
        paragraph.append(text)
    # Markdown links and emphasis read better as plain text in a one-line description.
    out = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", " ".join(paragraph))
    out = re.sub(r"[*_`]{1,3}([^*_`]+)[*_`]{1,3}", r"\1", out)
    return out[:MAX_DESCRIPTION].rstrip() + ("..." if len(out) > MAX_DESCRIPTION else "")


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
                rel = member.name[len(prefix):].strip("/")
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
                if not member.isfile() or not (fname.endswith(".tf") or fname.lower() in _README_NAMES):
                    continue
                if fname.endswith(".tf") and member.size > MAX_TF_BYTES:
                    shown = f"{directory}/{fname}" if directory else fname
                    notes.append(f"{shown}: larger than {MAX_TF_BYTES} bytes; its contents are not shown")
                    dirs[directory][fname] = b""  # still a .tf file: the module is not empty
                    continue
                handle = tar.extractfile(member)
                if handle is not None:
                    # One byte past the limit, so analyze() can tell a README was truncated.
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


def build_details(git: MirrorGit, mirror: str, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
    """Blocking: archive the commit from the mirror and read its details (runs in the git pool)."""
    base = resolved.rule.path.strip("/")
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
        writer = _CappedWriter(spool, MAX_TREE_BYTES)
        try:
            git.archive(mirror, tagged.sha, base, lambda tar: shutil.copyfileobj(tar, writer))
        except NoSuchTree as e:
            if e.commit_missing:
                raise UpstreamUnavailable(f"commit {tagged.sha[:12]} is not in gitreg's mirror") from None
            # The rule's `path` is not in this commit: an empty module says so better than a 502.
            empty = analyze({}, "")
            empty["notes"] = [f"the path {base!r} does not exist at tag {tagged.tag!r}"]
            return ModuleDetails("", "", empty, [])
        spool.seek(0)
        dirs, notes = read_tree(spool, "")  # `git archive <sha>:<path>`: the module's files are at the root
    if writer.truncated:
        notes.append(f"the module tree is larger than {MAX_TREE_BYTES} bytes; details may be incomplete")
    root = analyze(dirs.pop(""), "")
    root["notes"] = notes + root["notes"]
    submodules = [analyze(files, path) for path, files in sorted(dirs.items()) if path.startswith("modules/")]
    examples = [analyze(files, path) for path, files in sorted(dirs.items()) if path.startswith("examples/")]
    published = ""
    try:
        published = utc_timestamp(git.tag_dates(mirror).get(tagged.tag, ""))
    except Exception as e:  # noqa: BLE001 - a date is nice to have, never worth failing the details
        log.warning("could not read the date of tag %s: %s", tagged.tag, type(e).__name__)
    return ModuleDetails(description_from_readme(root["readme"]), published, root, submodules, examples)


def utc_timestamp(iso: str) -> str:
    """An ISO 8601 date with any offset as RFC 3339 UTC (`2026-01-02T03:04:05Z`); "" when unknown."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return ""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class DetailsService:
    """Details per (repository, path, tag, commit), from the mirrors, cached and de-duplicated.

    The LRU and the in-flight map are touched from the event loop only (cachetools is not
    thread-safe); the git and parsing work runs in the app's git pool.
    """

    def __init__(self, mirrors: MirrorStore, git: MirrorGit, pool: GitPool, entries: int = CACHE_ENTRIES) -> None:
        self.mirrors = mirrors
        self.git = git
        self.pool = pool
        self._cache: LRUCache[tuple[str, str, str, str], ModuleDetails] = LRUCache(maxsize=entries)
        self._inflight: dict[tuple[str, str, str, str], asyncio.Future[ModuleDetails]] = {}
        self.builds = 0

    async def get(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        """The details of `resolved` at `tagged`; GitregError when the mirror cannot be read."""
        key = (resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._build(resolved, tagged))
            self._inflight[key] = fut
            fut.add_done_callback(lambda f: self._done(key, f))
        return await asyncio.shield(fut)

    def cached(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails | None:
        """The details when they are in memory, else None (no git)."""
        return self._cache.get((resolved.repository, resolved.rule.path, tagged.tag, tagged.sha))

    def remember(self, resolved: ResolvedModule, tagged: TaggedVersion, details: ModuleDetails) -> None:
        """Keep details read from elsewhere (the index's disk store) in memory."""
        self._cache[(resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)] = details

    def _done(self, key: tuple[str, str, str, str], fut: asyncio.Future[ModuleDetails]) -> None:
        self._inflight.pop(key, None)
        if not fut.cancelled() and fut.exception() is None:
            self._cache[key] = fut.result()

    async def _build(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        # Held while it is read: eviction under [storage] max_bytes skips it. Mirroring for
        # details is background work.
        with git_priority(Priority.BACKGROUND):
            async with self.mirrors.use(resolved.repository, tagged.sha) as mirror:
                self.builds += 1
                return await self.pool.run(build_details, self.git, str(mirror), resolved, tagged,
                                           host=git_host(resolved.repository))

    async def try_get(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails | None:
        """Like get(), but None (logged) when the repository cannot be read: for listings."""
        try:
            return await self.get(resolved, tagged)
        except GitregError as e:
            log.warning("no details for %s %s: %s", resolved.address, tagged.canonical, e.message)
            return None
        except Exception:  # noqa: BLE001 - one odd repository must not fail a whole listing
            log.exception("no details for %s %s", resolved.address, tagged.canonical)
            return None
