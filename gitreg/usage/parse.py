"""The `module` blocks of one repository's `.tf` files that call this registry: run in a parse worker.

`consumers_in` is the parse workers' handler (gitreg/index/parse_workers.py): the request is
`{"hosts": [...], "files": [[path, bytes], ...]}`, the answer a list of
`{"file", "line", "address", "constraint"}` and the notes of files that could not be read. It
imports python-hcl2 only when a file may hold a matching `source` (a byte search for a host
first: most files of most repositories call no module of this registry, and are never parsed).
"""

from __future__ import annotations

import re
from typing import Any

# namespace/name/system as the registry protocol allows them (core.names, repeated here: this
# module runs in the worker, which imports nothing of gitreg's beyond it).
_PART = r"[0-9A-Za-z](?:[0-9A-Za-z_-]{0,62}[0-9A-Za-z])?"
_ADDRESS = re.compile(rf"(?P<ns>{_PART})/(?P<name>{_PART})/(?P<system>[0-9a-z]{{1,64}})")
MAX_SOURCE = 1000
MAX_CONSTRAINT = 200


def registry_address(source: Any, hosts: frozenset[str]) -> str | None:
    """`namespace/name/system` when `source` is `<host>/<ns>/<name>/<system>[//subdir]` with a host of
    `hosts` (case-insensitive), else None."""
    if not isinstance(source, str) or len(source) > MAX_SOURCE or "://" in source or "::" in source:
        return None
    base = source.strip().split("//", 1)[0].split("?", 1)[0]
    host, _, rest = base.partition("/")
    if host.lower() not in hosts:
        return None
    found = _ADDRESS.fullmatch(rest.rstrip("/"))
    return found.group(0) if found is not None else None


def _module_blocks(text: str) -> list[tuple[int, dict[str, Any]]]:
    """(first line, arguments) of each top-level `module` block of `text` (python-hcl2's values)."""
    import hcl2
    from hcl2.utils import SerializationOptions

    tree = hcl2.parses_to_tree(text)
    lines = []
    for body in tree.children[:1]:
        for block in getattr(body, "children", ()):
            if getattr(block, "data", None) != "block" or not block.children:
                continue
            kind = block.children[0]
            if getattr(kind, "data", None) == "identifier" and str(kind.children[0]) == "module":
                lines.append(block.meta.line if not block.meta.empty else 0)
    if not lines:
        return []
    options = SerializationOptions(
        with_comments=False, explicit_blocks=False, preserve_heredocs=True, strip_string_quotes=True
    )
    data = hcl2.serialize(hcl2.transform(tree), serialization_options=options)
    blocks = [args for item in data.get("module", ()) if isinstance(item, dict) for args in item.values()]
    return [(line, args) for line, args in zip(lines, blocks, strict=False) if isinstance(args, dict)]


def _file_consumers(name: str, text: str, hosts: frozenset[str]) -> list[dict[str, Any]]:
    found = []
    for line, args in _module_blocks(text):
        address = registry_address(args.get("source"), hosts)
        if address is None:
            continue
        version = args.get("version")
        constraint = version.strip()[:MAX_CONSTRAINT] if isinstance(version, str) else ""
        found.append({"file": name, "line": line, "address": address, "constraint": constraint})
    return found


def consumers_in(request: dict[str, Any]) -> dict[str, Any]:
    """The parse worker's handler (see the module docstring)."""
    hosts = frozenset(h.lower() for h in request["hosts"])
    needles = [h.encode() for h in hosts]
    consumers: list[dict[str, Any]] = []
    notes: list[str] = []
    for name, data in request["files"]:
        lowered = data.lower()
        if b"module" not in lowered or not any(n in lowered for n in needles):
            continue  # no `module` block can name this registry here: not parsed
        try:
            consumers += _file_consumers(name, data.decode("utf-8"), hosts)
        except UnicodeDecodeError:
            notes.append(f"{name}: not UTF-8; skipped")
        except Exception as e:  # noqa: BLE001 - lark raises many kinds (and RecursionError on deep nesting)
            notes.append(f"{name}: could not be parsed ({type(e).__name__}); skipped")
    return {"consumers": consumers, "notes": notes}
