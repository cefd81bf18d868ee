"""Search cost is bounded whatever a reader sends: a query's length and terms are capped, and
what it is compared with is read once per index generation, not once per query."""

from __future__ import annotations

import time

from gitreg.core.names import ModuleAddress
from gitreg.index.model import IndexedVersion, IndexEntry
from gitreg.index.search import MAX_TERMS, View, query_terms, readme_words

TOPICS = ("network", "cluster", "storage", "bucket", "vpc", "subnet", "queue", "database")


def many_modules(count: int) -> View:
    """`count` modules whose names, descriptions and READMEs share common words (as real ones do)."""
    entries: list[IndexEntry] = []
    readme: dict[str, set[ModuleAddress]] = {}
    version = IndexedVersion("1.0.0", "v1.0.0", "a" * 40)
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        words = readme_words(f"A terraform module for the {topic} and a {TOPICS[(i + 3) % 8]} example w{i}")
        entry = IndexEntry(
            address=ModuleAddress(f"team{i % 40}", f"{topic}-module-{i}", "aws"),
            repository=f"https://git.example.com/m{i}.git",
            path="",
            source="",
            versions=(version,),
            latest=version,
            description=f"A {topic} module with a name and a description",
            published_at="",
            verified=False,
            topics=("terraform", topic),
            words=words,
        )
        entries.append(entry)
        for word in words.split():
            readme.setdefault(word, set()).add(entry.address)
    return View(entries, readme)


def search(view: View, query: str) -> list[IndexEntry]:
    return view.search(query, lambda e: True, ("test",), lambda a: 0)


def test_a_hostile_query_at_ten_thousand_modules_costs_milliseconds_not_seconds():
    view = many_modules(10_000)
    search(view, "warm up")
    started = time.process_time()
    for i in range(5):
        # Each query differs (nothing remembered helps); before, each cost 1.3-1.8 s of the event loop.
        search(view, "a " * 95 + f"w{i}")
        search(view, "a e i o u r s t n l" + f" x{i}")
        search(view, "module terraform the and for" + f" {TOPICS[i]}")
    spent = (time.process_time() - started) / 15
    assert spent < 0.1, f"{spent * 1000:.0f} ms of CPU per query"


def test_a_query_uses_its_first_distinct_words_and_ignores_the_rest():
    _, words = query_terms("VPC vpc " + " ".join(f"w{i}" for i in range(30)))
    assert words == ["vpc", *(f"w{i}" for i in range(MAX_TERMS - 1))]
    view = many_modules(50)
    # Words past the first MAX_TERMS match nothing, and do not empty the answer.
    padding = "module module terraform the for and example aws cluster team17"
    assert [str(e.address) for e in search(view, f"w17 {padding} no-such-word")] == ["team17/cluster-module-17/aws"]


def test_search_still_finds_every_word_anywhere_and_ranks_names_first():
    view = many_modules(200)
    assert str(search(view, "vpc-module-4")[0].address) == "team4/vpc-module-4/aws"
    assert [str(e.address) for e in search(view, "w17")] == ["team17/cluster-module-17/aws"]
    assert [str(e.address) for e in search(view, "cluster w17")] == ["team17/cluster-module-17/aws"]
    assert [str(e.address) for e in search(view, "storage w17")] == []
