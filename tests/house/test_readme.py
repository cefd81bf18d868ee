"""The README and docs stay true: every config key and metric is documented, every link resolves.

The keys come from the config dataclasses and the metrics from a live app's /metrics, so a key or
metric added later fails here until the documentation names it (docs/configuration.md,
docs/operations.md: tests/support/docs.py finds a section in whichever page holds it).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitreg.config.model import Config
from tests.support import docs
from tests.support.app import make_config
from tests.support.repos import GitRepo

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _dataclass_of(hint: object) -> type | None:
    """The dataclass a field holds: itself, or the item type of a `tuple[X, ...]`."""
    if dataclasses.is_dataclass(hint):
        return hint  # type: ignore[return-value]
    if typing.get_origin(hint) is tuple:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        if len(args) == 1 and dataclasses.is_dataclass(args[0]):
            return typing.cast(type, args[0])
    return None


def config_keys(cls: type = Config, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of the config, from the dataclasses: ("server", "port"), ("modules", "download"), ...

    A field holding a dataclass (or a tuple of them) is a table (or an array of tables) whose
    fields are keys in turn; `Config.source` is where the config came from, not a key.
    """
    hints = typing.get_type_hints(cls)
    keys: list[tuple[str, ...]] = []
    for f in dataclasses.fields(cls):
        if cls is Config and f.name == "source":
            continue
        nested = _dataclass_of(hints[f.name])
        if nested is not None:
            if parent:  # a key holding tables (auth.tokens) is documented itself, as well as its keys
                keys.append((*parent, f.name))
            keys.extend(config_keys(nested, (*parent, f.name)))
        else:
            keys.append((*parent, f.name))
    return keys


def _array_tables() -> set[str]:
    hints = typing.get_type_hints(Config)
    return {f.name for f in dataclasses.fields(Config) if typing.get_origin(hints[f.name]) is tuple}


def test_the_key_list_is_derived_from_the_dataclasses():
    keys = config_keys()
    # What the README must name is taken from the code: a few known keys prove the walk works.
    for expected in [
        ("server", "public_url"),
        ("storage", "max_bytes"),
        ("auth", "signed_url_ttl_seconds"),
        ("modules", "archive_root"),
        ("auth", "tokens", "namespaces"),
        ("credentials", "password"),
    ]:
        assert expected in keys
    assert len(keys) >= 35


@pytest.mark.parametrize("key", config_keys(), ids=".".join)
def test_every_config_key_is_in_the_readme_configuration_table(key):
    table = docs.section("Configuration")
    rows = [line for line in table.splitlines() if line.startswith("|")]
    if key[0] in _array_tables():
        # [[modules]] and [[credentials]]: their row names each key of a table.
        owner = f"`[[{key[0]}]]`"
        name = key[-1]
    elif len(key) == 2:
        owner, name = None, ".".join(key)
    else:
        owner, name = f"`{'.'.join(key[:-1])}`", key[-1]
    # An array of tables inside a section ([[auth.forges]]) has one row, named as it is written.
    owners = (owner, owner and f"`[[{owner.strip('`')}]]`")
    candidates = [r for r in rows if owner is None or any(o in r.split("|")[1] for o in owners if o)]
    assert candidates, f"no row for {owner} in the configuration table (docs/configuration.md)"
    assert any(f"`{name}`" in r or (owner is None and f"`[[{name}]]`" in r) for r in candidates), (
        f"{'.'.join(key)} is missing from the configuration table (docs/configuration.md)"
    )


def metric_families(text: str) -> set[str]:
    """The metric names an operator queries, from Prometheus text: counters with `_total`, no `_created` twins."""
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    names = set()
    for name, kind in families.items():
        if name.endswith("_created") and name.removesuffix("_created") in families:
            continue  # prometheus_client's creation timestamps of counters and histograms
        names.add(name + "_total" if kind == "counter" else name)
    return names


async def test_every_metric_a_live_app_exposes_is_in_the_readme_metrics_table(serve_client, tmp_path):
    repo = GitRepo(tmp_path / "repos", "hello")
    repo.commit({"main.tf": "# hello\n"})
    repo.tag("v1.0.0")
    rules = [
        {"namespace": "demo", "name": "hello", "system": "null", "repository": repo.url},
        {"namespace": "demo", "name": "packed", "system": "null", "repository": repo.url, "download": "archive"},
    ]
    client = await serve_client(make_config(rules, storage={"path": str(tmp_path / "state")}))
    for path in (
        "/v1/modules/demo/hello/null/versions",
        "/v1/modules/demo/hello/null/1.0.0/download",
        "/v1/modules/demo/packed/null/1.0.0/download",
        "/v1/modules/demo/packed/null/1.0.0/archive.tar.gz",
        "/v1/modules/demo/gone/null/versions",
        "/healthz",
    ):
        await client.get(path)
    exposed = metric_families(await (await client.get("/metrics")).text())
    assert "gitreg_http_requests_total" in exposed and "gitreg_archives" in exposed
    table = docs.section("Metrics")
    documented = set(re.findall(r"`(gitreg_\w+)(?:\{[^`]*\})?`", table))
    missing = sorted(exposed - documented)
    assert not missing, f"metrics missing from the metrics table (docs/operations.md): {missing}"


# --- links -------------------------------------------------------------------------------------------

DOCUMENTS = [*docs.documents(), ROOT / "SECURITY.md", ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md"]
_LINK_RE = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code, where `[x](y)` is not a link."""
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"(`+).*?\1", "", text, flags=re.DOTALL)


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as '-', repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+?)\s*#*\s*$", prose_keep_headings(text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def prose_keep_headings(text: str) -> str:
    """Text without fenced code blocks (a `# comment` in a shell block is no heading); inline code kept."""
    return re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.MULTILINE | re.DOTALL).replace("`", "")


def relative_links(path: Path) -> list[str]:
    return [t for t in _LINK_RE.findall(prose(path.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_link_checker_finds_links_and_anchors():
    sample = "# A title, with `code`\n\n[x](docs/a.md#b) `[not](a-link)`\n```\n[no](pe)\n# not a heading\n```\n"
    assert _LINK_RE.findall(prose(sample)) == ["docs/a.md#b"]
    assert anchors(sample) == {"a-title-with-code"}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_heading_in_the_repository(document):
    assert document.is_file(), document
    broken = []
    for target in relative_links(document):
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists() or ROOT not in (linked, *linked.parents):
            broken.append(f"{target}: no such file in the repository")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_the_client_and_api_docs():
    links = relative_links(README)
    assert any(link.startswith("docs/clients.md") for link in links)
    assert any(link.startswith("docs/api.md") for link in links)


# --- routes ------------------------------------------------------------------------------------------

# The catch-alls: no endpoint, what answers a path no route serves (404 or 405).
CATCH_ALLS = {"unrouted", "ui-no-page"}
_PATH_RE = re.compile(r"/[A-Za-z0-9._{}\[\]/-]*")
_OPTIONAL_RE = re.compile(r"\[([^\[\]]*)\]")  # an optional part of a path


def documented_paths(text: str) -> set[str]:
    """Every path written in inline code (`GET /v1/modules/{namespace}`), with optional parts
    (`/modules/{namespace}/{name}/{system}[/{version}]`) both left out and kept."""
    found: set[str] = set()
    for code in re.findall(r"`([^`\n]+)`", text):
        for path in _PATH_RE.findall(code):
            variants = {path.rstrip(".,")}
            while any(_OPTIONAL_RE.search(v) for v in variants):
                variants = {w for v in variants for w in (_OPTIONAL_RE.sub("", v, 1), _OPTIONAL_RE.sub(r"\1", v, 1))}
            found |= variants
    return found


def test_the_route_check_reads_paths_with_optional_parts():
    text = "`GET /modules/{namespace}/{name}/{system}[/{version}]` and `POST /login`."
    assert documented_paths(text) == {
        "/modules/{namespace}/{name}/{system}",
        "/modules/{namespace}/{name}/{system}/{version}",
        "/login",
    }


def test_every_route_the_app_registers_is_named_in_the_docs():
    # The README (its HTTP API section, or wherever a section moves) or a page under docs/.
    from gitreg.web.app import create_app

    config = make_config(
        [{"namespace": "a", "name": "b", "system": "c", "repository": "file:///nowhere"}],
        auth={
            "tokens": ["t" * 20],
            "signing_key": "s" * 40,
            "forges": [
                {
                    "provider": "gitlab",
                    "url": "https://gitlab.example.com",
                    "oauth_client_id": "i",
                    "oauth_client_secret": "x" * 20,
                }
            ],
        },
        webhooks={"github_secret": "g" * 20, "gitlab_token": "l" * 20},
    )
    app = create_app(config)
    routes = {r.canonical for r in app.router.resources() if r.name not in CATCH_ALLS}
    assert {"/oauth/authorize", "/oauth/token", "/oauth/callback", "/login", "/webhooks/gitlab"} <= routes
    documented = set().union(*(documented_paths(doc.read_text()) for doc in docs.documents()))
    missing = sorted(routes - documented)
    assert not missing, f"routes no document names (README.md or docs/**/*.md): {missing}"
