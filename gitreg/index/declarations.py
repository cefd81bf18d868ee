"""What a module's files declare: inputs, outputs, module calls, providers, resources, its description.

Pure functions over bytes, no git and no I/O. `.tf` files are parsed with python-hcl2 (never by
running Terraform) and the README's description with markdown-it-py. Repository content is
hostile: these run in the parse worker processes (parse_workers.py, `parse_request` is their
handler) under the details' wall-clock budget, and the text handling here uses no regular
expression that can backtrack over it. A file that does not parse is skipped with a note: the
rest still shows.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import textwrap
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

# Limits that keep one odd file from costing unbounded memory or CPU.
MAX_TF_BYTES = 512 * 1024  # per .tf file; larger files are skipped with a note
MAX_README_BYTES = 256 * 1024  # per README, truncated beyond
MAX_DESCRIPTION = 300
# The description is the README's first paragraph: the top of the README is enough to find
# it, and the reference definitions below it are read for `[text][ref]` links (characters).
MAX_DESCRIPTION_SOURCE = 16 * 1024
MAX_REFERENCE_SOURCE = 16 * 1024

README_NAMES = ("readme.md", "readme.markdown", "readme")
_DECLARED = ("inputs", "outputs", "dependencies", "resources")  # lists; "providers" is merged by name
# Linear: anchored at the start, no nested or adjacent repeats that could backtrack.
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


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
    for candidate in README_NAMES:
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
        return no_declarations(f"{shown}{name}: larger than {MAX_TF_BYTES} bytes; its contents are not shown")
    try:
        parsed = _hcl_loads(raw.decode("utf-8"))
        return {**_declarations(parsed), "notes": []}
    except UnicodeDecodeError:
        return no_declarations(f"{shown}{name}: not UTF-8; skipped")
    except Exception as e:  # noqa: BLE001 - lark raises many kinds (and RecursionError on deep nesting)
        return no_declarations(f"{shown}{name}: could not be parsed ({_parse_error(e)}); its contents are not shown")


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


def no_declarations(note: str) -> dict[str, Any]:
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


def is_declarations(answer: dict[str, Any]) -> bool:
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
