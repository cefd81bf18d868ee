"""Module details read from a tagged tree: README, inputs, outputs, module calls, providers, resources.

The tree comes from a shallow fetch of the tag, or from gitreg's mirror of the repository when
it keeps one (`git archive` of the tag's commit, read in memory with tarfile); `.tf` files are
parsed with python-hcl2, never by running Terraform, and the README's description with
markdown-it-py. Repository content is hostile: the parsing runs in worker processes
(parse_workers.py) under a wall-clock budget per module, so no README or `.tf` file can
hold the server's GIL; the text handling here uses no regular expression that can backtrack
over it. Details depend only on the commit, so they are cached by (repository, path, tag,
commit SHA) in a bounded LRU. A file that does not parse is skipped with a note: the rest
still shows.
"""

from __future__ import annotations

import asyncio
import functools
import io
import itertools
import json
import logging
import re
import shutil
import tarfile
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cachetools import LRUCache
from markdown_it import MarkdownIt
from markdown_it.token import Token

from gitreg.core.errors import Overloaded, UpstreamUnavailable
from gitreg.core.flight import InFlight
from gitreg.index.parse_workers import BudgetExceeded, ParseWorkers, WorkerFailed

if TYPE_CHECKING:  # annotations only: the parse workers import this module and need none of them
    from gitreg.config.rules import ResolvedModule
    from gitreg.core.versions import TaggedVersion
    from gitreg.git.mirror import MirrorGit
    from gitreg.git.pool import GitPool
    from gitreg.storage.mirrors import MirrorStore

log = logging.getLogger(__name__)
T = TypeVar("T")

# Limits that keep one odd repository from costing unbounded memory or CPU.
MAX_TREE_BYTES = 64 * 1024 * 1024  # of the `git archive` stream kept (the rest is discarded)
MAX_TF_BYTES = 512 * 1024  # per .tf file; larger files are skipped with a note
MAX_README_BYTES = 256 * 1024  # per README, truncated beyond
MAX_SUBMODULES = 200
MAX_DESCRIPTION = 300
# The description is the README's first paragraph: the top of the README is enough to find
# it, and the reference definitions below it are read for `[text][ref]` links (characters).
MAX_DESCRIPTION_SOURCE = 16 * 1024
MAX_REFERENCE_SOURCE = 16 * 1024
# Wall-clock parsing budget of one module's details (root and submodules). python-hcl2 reads
# about 100 KB of ordinary .tf per second; hostile files at the 512 KB cap take 10-30 s.
PARSE_SECONDS = 20.0
CACHE_ENTRIES = 256

_README_NAMES = ("readme.md", "readme.markdown", "readme")
_DECLARED = ("inputs", "outputs", "dependencies", "resources")  # lists; "providers" is merged by name
# Linear: anchored at the start, no nested or adjacent repeats that could backtrack.
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class ModuleDetails:
    """What the details endpoints show about one module at one commit (JSON-ready parts)."""

    description: str
    published_at: str
    root: dict[str, Any]
    submodules: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)  # each `examples/*` directory


def heredoc_body(value: str) -> str | None:
    """The text of a raw heredoc as python-hcl2 keeps it (`<<ID`, lines, `ID`; `<<-ID` dedented), else None.

    Found with string methods in one pass, not a regular expression: the body is hostile and
    can be long (a backtracking pattern took 12 s on a 60 KB body).
    """
    if not value.startswith("<<"):
        return None
    indented = value.startswith("<<-")
    first, last = value.find("\n"), value.rfind("\n")
    if first < 0:
        return None
    marker = value[3 if indented else 2 : first].removesuffix("\r")
    if not marker or "".join(marker.split()) != marker or value[last + 1 :].lstrip(" \t") != marker:
        return None
    body = value[first + 1 : last].removesuffix("\r").replace("\r\n", "\n") if last > first else ""
    return textwrap.dedent(body) if indented else body


def hcl_text(value: Any) -> str:
    """A python-hcl2 value as display text: heredocs dedented, `${expr}` unwrapped."""
    if not isinstance(value, str):
        return "" if value is None else json.dumps(value)
    body = heredoc_body(value)
    if body is not None:
        return body
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


def readme_of(files: dict[str, bytes]) -> tuple[str, list[str]]:
    """The directory's README as text (truncated beyond MAX_README_BYTES, with a note) and its notes."""
    for candidate in _README_NAMES:
        name = next((n for n in files if n.lower() == candidate), None)
        if name is not None:
            raw = files[name]
            notes = [f"{name}: longer than {MAX_README_BYTES} bytes; truncated"] if len(raw) > MAX_README_BYTES else []
            return raw[:MAX_README_BYTES].decode("utf-8", "replace"), notes
    return "", []


def parse_file(name: str, raw: bytes, path: str) -> dict[str, Any]:
    """What one `.tf` file declares (inputs, outputs, module calls, resources, providers by name), or a note.

    CPU-heavy on hostile input (pure-Python parsing): the server runs it in a worker process.
    """
    shown = f"{path}/" if path else ""
    if len(raw) > MAX_TF_BYTES:
        return _no_declarations(f"{shown}{name}: larger than {MAX_TF_BYTES} bytes; its contents are not shown")
    try:
        parsed = _hcl_loads(raw.decode("utf-8"))
        return {**_declarations(parsed), "notes": []}
    except UnicodeDecodeError:
        return _no_declarations(f"{shown}{name}: not UTF-8; skipped")
    except Exception as e:  # noqa: BLE001 - lark raises many kinds (and RecursionError on deep nesting)
        return _no_declarations(f"{shown}{name}: could not be parsed ({_parse_error(e)}); its contents are not shown")


def _hcl_loads(text: str) -> Any:
    """python-hcl2's plain Python values: unquoted strings, no block markers, heredocs kept raw
    (its own heredoc-to-string conversion leaves escaped quotes behind; we dedent ourselves).

    Imported here: only the parse worker processes parse, and python-hcl2 (with its grammar)
    is a tenth of the server's start-up imports.
    """
    import hcl2
    from hcl2.utils import SerializationOptions

    options = SerializationOptions(
        with_comments=False, explicit_blocks=False, preserve_heredocs=True, strip_string_quotes=True
    )
    return hcl2.loads(text, serialization_options=options)


def _no_declarations(note: str) -> dict[str, Any]:
    """parse_file()'s answer for a file whose contents are not shown."""
    return {**{key: [] for key in _DECLARED}, "providers": {}, "notes": [note]}


def merge_declarations(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The parse_file() answers of a directory's files, in file order, as one (providers sorted by name)."""
    merged: dict[str, Any] = {key: [] for key in (*_DECLARED, "notes")}
    providers: dict[str, dict[str, Any]] = {}
    for part in parts:
        for key in (*_DECLARED, "notes"):
            merged[key] += part[key]
        providers.update(part["providers"])  # a later file's declaration of a provider wins
    merged["providers"] = [providers[k] for k in sorted(providers)]
    return merged


def _declarations(parsed: dict[str, Any]) -> dict[str, Any]:
    """What one parsed `.tf` file declares (providers by name: a later file may override one)."""
    inputs = []
    for label, body in _blocks(parsed, "variable"):
        required = "default" not in body
        inputs.append(
            {
                "name": label,
                "type": hcl_text(body["type"]) if "type" in body else "any",
                "description": hcl_text(body.get("description", "")),
                "default": "" if required else json.dumps(hcl_literal(body["default"]), ensure_ascii=False),
                "required": required,
                "sensitive": _as_bool(body.get("sensitive")),
            }
        )
    outputs = [
        {
            "name": label,
            "description": hcl_text(body.get("description", "")),
            "sensitive": _as_bool(body.get("sensitive")),
        }
        for label, body in _blocks(parsed, "output")
    ]
    dependencies = [
        {"name": label, "source": hcl_text(body.get("source", "")), "version": hcl_text(body.get("version", ""))}
        for label, body in _blocks(parsed, "module")
    ]
    resources = [{"name": str(rname), "type": rtype} for rtype, body in _blocks(parsed, "resource") for rname in body]
    providers: dict[str, dict[str, Any]] = {}
    for terraform in parsed.get("terraform", []) or []:
        if isinstance(terraform, dict):
            for block in terraform.get("required_providers", []) or []:
                if isinstance(block, dict):
                    for pname, spec in block.items():
                        providers[str(pname)] = _provider(str(pname), spec)
    return {
        "inputs": inputs,
        "outputs": outputs,
        "dependencies": dependencies,
        "resources": resources,
        "providers": providers,
    }


def directory_details(path: str, files: dict[str, bytes], declared: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The JSON of one module directory: its README, what merge_declarations() gives, and every note."""
    readme, readme_notes = readme_of(files)
    return {
        "path": path,
        "readme": readme,
        "empty": not any(n.endswith(".tf") for n in files),
        **{key: declared[key] for key in ("inputs", "outputs", "dependencies", "providers", "resources")},
        "notes": notes + readme_notes + declared["notes"],
    }


def parse_request(request: dict[str, Any]) -> dict[str, Any]:
    """A parse worker's job (see DetailsService._parse): a README's description, or parse_file() of one file."""
    if "readme" in request:
        return {"description": description_from_readme(request["readme"])}
    return parse_file(request["name"], request["data"], request["path"])


def _is_declarations(answer: dict[str, Any]) -> bool:
    """Whether a worker's answer has parse_file()'s shape (the merge relies on it)."""
    return isinstance(answer.get("providers"), dict) and all(
        isinstance(answer.get(k), list) for k in (*_DECLARED, "notes")
    )


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
    if isinstance(e, MemoryError):
        return "it needs too much memory"
    return type(e).__name__


@functools.cache
def _markdown() -> MarkdownIt:
    """CommonMark with GitHub's tables and strikethrough, HTML recognised; block rules only.

    The core `inline` rule is off: only the paragraph that becomes the description has its
    inline Markdown parsed (description_from_readme), not every line of the README.
    """
    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).disable("inline")


def description_from_readme(readme: str) -> str:
    """The README's first paragraph of prose as one line of plain text, at most MAX_DESCRIPTION characters.

    A paragraph at the top level of the document: not a heading, quote, list, table, HTML
    block, code block or link reference definition. Link text and code spans are kept as
    text; emphasis markers, images (badges) and inline HTML are dropped; a paragraph with no
    text left (a row of badges) is skipped. markdown-it-py is linear in its input, but slow
    on hostile input (tens of microseconds a byte): only the top of the README is parsed,
    plus the link reference definitions further down that `[text][ref]` links may use.
    """
    md = _markdown()
    env: dict[str, Any] = {}
    cut = len(readme)
    if cut > MAX_DESCRIPTION_SOURCE:  # at a line's end, unless the first line is that long
        cut = readme.rfind("\n", 0, MAX_DESCRIPTION_SOURCE) + 1 or MAX_DESCRIPTION_SOURCE
    tokens = md.parse(readme[:cut], env)
    md.parse(_reference_lines(readme[cut:]), env)  # later definitions add to env["references"]
    for opening, token in itertools.pairwise(tokens):
        if token.type == "inline" and opening.type == "paragraph_open" and opening.level == 0:
            text = " ".join(_plain_text(md.inline.parse(token.content, md, env, [])).split())
            if text:
                return text[:MAX_DESCRIPTION].rstrip() + ("..." if len(text) > MAX_DESCRIPTION else "")
    return ""


def _reference_lines(markdown: str) -> str:
    """The lines that may be link reference definitions (`[label]: url`), each its own block, up to a bound."""
    kept: list[str] = []
    size = 0
    for line in markdown.splitlines():
        text = line.lstrip(" ")
        if len(line) - len(text) <= 3 and text.startswith("[") and "]:" in text:
            size += len(line)
            if size > MAX_REFERENCE_SOURCE:
                break
            kept.append(text)
    return "\n\n".join(kept)


def _plain_text(inline: list[Token]) -> str:
    """Inline tokens as text: words and code spans kept; markup, images and HTML dropped; line breaks as spaces."""
    parts = []
    for token in inline:
        if token.type in ("text", "text_special", "code_inline"):
            parts.append(token.content)
        elif token.type in ("softbreak", "hardbreak") or (
            token.type == "html_inline" and token.content[:3].lower() == "<br"
        ):
            parts.append(" ")
    return "".join(parts)


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
                if not member.isfile() or not (fname.endswith(".tf") or fname.lower() in _README_NAMES):
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
    if writer.truncated:
        notes.append(f"the module tree is larger than {MAX_TREE_BYTES} bytes; details may be incomplete")
    published = ""
    try:
        published = utc_timestamp(git.tag_dates(mirror).get(tagged.tag, ""))
    except Exception as e:  # noqa: BLE001 - a date is nice to have, never worth failing the details
        log.warning("could not read the date of tag %s: %s", tagged.tag, type(e).__name__)
    return CommitTree(dirs, notes, published)


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


class DetailsService:
    """Details per (repository, path, tag, commit), from the mirrors, cached and de-duplicated.

    The LRU and the in-flight map are touched from the event loop only (cachetools is not
    thread-safe). The git work runs in the app's executor; the parsing in this service's
    worker processes (ParseWorkers), within `parse_seconds` per module, so hostile content
    never holds the server's GIL. close() stops the workers (the app's cleanup calls it).
    """

    def __init__(
        self,
        mirrors: MirrorStore,
        git: MirrorGit,
        pool: GitPool,
        entries: int = CACHE_ENTRIES,
        parse_seconds: float = PARSE_SECONDS,
    ) -> None:
        self.mirrors = mirrors
        self.git = git
        self.pool = pool
        self.parse_seconds = parse_seconds
        self.workers = ParseWorkers(f"{__name__}:{parse_request.__name__}")
        self._cache: LRUCache[tuple[str, str, str, str], ModuleDetails] = LRUCache(maxsize=entries)
        self._inflight: InFlight[tuple[str, str, str, str], ModuleDetails] = InFlight(self._done)
        self.builds = 0

    async def get(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        """The details of `resolved` at `tagged`; GitregError when the mirror cannot be read."""
        key = (resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        # Shielded: a reader who leaves does not stop the build others (or the next one) wait for.
        return await self._inflight.wait(self._inflight.join(key, lambda: self._build(resolved, tagged)))

    def _done(self, key: tuple[str, str, str, str], fut: asyncio.Future[ModuleDetails]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self._cache[key] = fut.result()

    def cached(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails | None:
        """The details when they are in memory, else None (no git)."""
        return self._cache.get((resolved.repository, resolved.rule.path, tagged.tag, tagged.sha))

    def remember(self, resolved: ResolvedModule, tagged: TaggedVersion, details: ModuleDetails) -> None:
        """Keep details read from elsewhere (the index's disk store) in memory."""
        self._cache[(resolved.repository, resolved.rule.path, tagged.tag, tagged.sha)] = details

    async def _build(self, resolved: ResolvedModule, tagged: TaggedVersion) -> ModuleDetails:
        from gitreg.core.urls import origin_label
        from gitreg.git.pool import Priority, git_priority  # here: see read_commit

        self.workers.warm()  # a worker starts while git works
        # The repository is kept while it is read (a mirror is held from eviction under
        # [storage] max_bytes, a scratch fetch removed after); reading details is background work.
        with git_priority(Priority.BACKGROUND):
            archives = resolved.rule.download == "archive"  # its downloads need the mirror anyway
            async with self.mirrors.snapshot(resolved.repository, tagged.tag, tagged.sha, archives) as mirror:
                self.builds += 1
                tree = await self.pool.run(
                    read_commit, self.git, str(mirror), resolved, tagged, host=origin_label(resolved.repository)
                )
        return await self._parse(tree)

    async def _parse(self, tree: CommitTree) -> ModuleDetails:
        """The description and each `.tf` file, parsed in a worker one by one, within one `parse_seconds` budget."""
        description = ""
        declared: dict[str, list[dict[str, Any]]] = {path: [] for path in tree.dirs}
        readme = readme_of(tree.dirs[""])[0]
        jobs = [  # (directory, what the notes call it, request): the root's README first, then the root
            (path, f"{path}/{name}" if path else name, {"path": path, "name": name, "data": files[name]})
            for path, files in sorted(tree.dirs.items())
            for name in sorted(n for n in files if n.endswith(".tf"))
        ]
        if readme:
            jobs.insert(0, ("", "the README's description", {"readme": readme}))
        try:
            if jobs:
                async with self.workers.budget(self.parse_seconds) as call:
                    for path, shown, request in jobs:
                        answer = await self._ask(call, request, shown)
                        if isinstance(answer.get("description"), str):
                            description = answer["description"]
                        else:  # declarations, or the note saying why there are none
                            declared[path].append(answer)
        except OSError as e:
            log.warning("no parse worker for the details: %s", e)
            raise Overloaded("gitreg cannot start a process to read the module's files now; try again later") from e
        dirs = {
            path: directory_details(
                path, tree.dirs[path], merge_declarations(declared[path]), tree.notes if path == "" else []
            )
            for path in sorted(tree.dirs)
        }
        root = dirs.pop("")
        submodules = [d for path, d in dirs.items() if path.startswith("modules/")]
        examples = [d for path, d in dirs.items() if path.startswith("examples/")]
        return ModuleDetails(description, tree.published_at, root, submodules, examples)

    async def _ask(self, call: Callable[[Any], Any], request: dict[str, Any], shown: str) -> dict[str, Any]:
        """One parse_request() answer from the worker, or no declarations and a note saying why."""
        try:
            answer = await call(request)
        except BudgetExceeded:
            return _no_declarations(f"{shown}: not shown: parsing took longer than {self.parse_seconds:g} s")
        except WorkerFailed as e:
            log.warning("a parse worker stopped while reading %s: %s", shown, e)
            return _no_declarations(f"{shown}: the parser stopped on it; its contents are not shown")
        if isinstance(answer, dict) and (
            _is_declarations(answer) if "data" in request else isinstance(answer.get("description"), str)
        ):
            return answer
        # The worker's way of saying it ran out of memory, or an answer we cannot use.
        return _no_declarations(f"{shown}: could not be parsed; its contents are not shown")

    async def close(self) -> None:
        """Stop the parse workers (a build still running gets notes instead of its declarations)."""
        await self.workers.close()
