"""Listing and search over one generation of the index: query matching, ranking, and remembered answers.

A generation (`View`) is built once per change of the index; lists and searches of a generation
are remembered (bounded), so a warm list or search is a dictionary lookup and a slice.

A search's cost is bounded whatever a reader sends, since it runs on the event loop: the
query is at most MAX_SEARCH_CHARS characters and its first MAX_TERMS distinct words are
used (the others are ignored); what it is compared with is casefolded once per generation
(`_Doc`), and each word narrows the candidates left by the one before, so a query costs at
most terms x modules substring checks (a few milliseconds at 10,000 modules).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from gitreg.core.names import MAX_SEARCH_CHARS, ModuleAddress
from gitreg.index.model import IndexEntry

# README words kept per module for search (distinct, lowercased).
MAX_WORDS = 2000
# Search answers remembered per index generation (a new generation forgets them all).
SEARCH_MEMO = 256
# Module positions remembered per generation for README words (about 50 bytes each).
README_MEMO_POSITIONS = 500_000
# Words of a query that search uses (the first ones, distinct); the rest are ignored.
MAX_TERMS = 10
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_-]{1,39}")


def readme_words(readme: str) -> str:
    """The distinct words of a README (lowercased, in order of first use), for search."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(readme.casefold()):
        seen.setdefault(word, None)
        if len(seen) >= MAX_WORDS:
            break
    return " ".join(seen)


def query_terms(query: str) -> tuple[str, list[str]]:
    """The query as search reads it: casefolded, at most MAX_SEARCH_CHARS characters, and its
    first MAX_TERMS distinct words (split at spaces and slashes; further words are ignored)."""
    q = query.casefold().strip()[:MAX_SEARCH_CHARS]
    words = list(dict.fromkeys(w for w in re.split(r"[\s/]+", q) if w))
    return q, words[:MAX_TERMS]


class _Doc(NamedTuple):
    """What search reads of one entry, casefolded once per generation (never per query)."""

    name: str
    namespace: str
    system: str
    topics: tuple[str, ...]
    description: str
    ident: str  # namespace/name/system
    haystack: str  # ident, description and topics: each word must be in it or in the README
    order: str  # str(address): the last tie-break


def _doc(entry: IndexEntry) -> _Doc:
    a = entry.address
    name, namespace = a.name.casefold(), a.namespace.casefold()
    topics = tuple(t.casefold() for t in entry.topics)
    description = entry.description.casefold()
    ident = f"{namespace}/{name}/{a.system}"
    haystack = f"{ident}\n{description}\n{' '.join(topics)}"
    return _Doc(name, namespace, a.system, topics, description, ident, haystack, str(a))


def search_rank(q: str, words: list[str], d: _Doc, every_word: bool) -> int | None:
    """Lower is better; None when the module does not match.

    0 the name is the query; 1 the name starts with it; 2 the name contains it (or every
    word of it); 3 the namespace, system or a topic is it, or `namespace/name/system` contains
    it; 4 the description contains it; 5 every word appears somewhere (in the name, namespace,
    system, description or topics, or as a word of the README: `every_word`, which the
    caller found).
    """
    name = d.name
    if name == q:
        return 0
    if name.startswith(q):
        return 1
    if q in name or (len(words) > 1 and words[0] in name and all(w in name for w in words)):
        return 2
    if q in (d.namespace, d.system) or q in d.topics or q in d.ident:
        return 3
    if q in d.description:
        return 4
    return 5 if every_word else None


class View:
    """The entries of one index generation: sorted for listing, with what search looks in."""

    def __init__(self, entries: Iterable[IndexEntry], readme: Mapping[str, set[ModuleAddress]]) -> None:
        self.ordered = sorted(
            entries,
            key=lambda e: (e.address.namespace.casefold(), e.address.name.casefold(), e.address.system, str(e.address)),
        )
        self.by_namespace: dict[str, list[IndexEntry]] = {}
        for e in self.ordered:
            self.by_namespace.setdefault(e.address.namespace, []).append(e)
        # Names, descriptions and topics: substring search. README words: whole words only.
        self.docs = [_doc(e) for e in self.ordered]
        self.haystacks = [d.haystack for d in self.docs]
        self.position = {e.address: i for i, e in enumerate(self.ordered)}
        self.position_by_id = {id(e.address): i for i, e in enumerate(self.ordered)}
        self.readme = readme  # word -> modules whose README has it (kept by the index as it changes)
        self.memo: OrderedDict[tuple[object, ...], list[IndexEntry]] = OrderedDict()
        # README word -> positions: a common word's set costs a hash per module to make.
        self.readme_memo: OrderedDict[str, set[int]] = OrderedDict()
        self.readme_memo_size = 0
        self.facet_memo: dict[tuple[object, ...], tuple[list[str], list[str]]] = {}

    def remembered(self, key: tuple[object, ...], make: Callable[[], list[IndexEntry]]) -> list[IndexEntry]:
        """The answer for `key` in this generation, made once."""
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = make()
            while len(self.memo) > SEARCH_MEMO:
                self.memo.popitem(last=False)
        else:
            self.memo.move_to_end(key)
        return found

    def facets(self, key: tuple[object, ...], entries: Callable[[], list[IndexEntry]]) -> tuple[list[str], list[str]]:
        """Sorted namespaces and systems of `entries()` (the pages' filters), once per key and generation."""
        found = self.facet_memo.get(key)
        if found is None:
            listed = entries()
            found = sorted({e.address.namespace for e in listed}), sorted({e.address.system for e in listed})
            if len(self.facet_memo) >= SEARCH_MEMO:
                self.facet_memo.clear()
            self.facet_memo[key] = found
        return found

    def listed(
        self,
        keep: Callable[[IndexEntry], bool],
        memo_key: tuple[object, ...] | None = None,
        namespaces: Iterable[str] | None = None,
    ) -> list[IndexEntry]:
        """Entries for which `keep` holds, in list order (within `namespaces` when given); remembered per `memo_key`."""

        def make() -> list[IndexEntry]:
            if namespaces is None:
                pool: Iterable[IndexEntry] = self.ordered
            else:
                wanted = sorted(set(namespaces), key=lambda n: (n.casefold(), n))
                pool = [e for n in wanted for e in self.by_namespace.get(n, ())]
            return [e for e in pool if keep(e)]

        if memo_key is None:
            return make()
        return self.remembered(("list", *memo_key), make)

    def search(
        self,
        query: str,
        keep: Callable[[IndexEntry], bool],
        memo_key: tuple[object, ...],
        downloads: Callable[[ModuleAddress], int],
    ) -> list[IndexEntry]:
        """Matching entries, best first (ties: most downloaded, then by address); remembered per `memo_key`."""

        q, words = query_terms(query)

        def make() -> list[IndexEntry]:
            ranked = []
            docs, ordered = self.docs, self.ordered
            common = self.every_word(words)
            for i in self.containing(q) | common:
                entry = ordered[i]
                if not keep(entry):
                    continue
                rank = search_rank(q, words, docs[i], i in common)
                if rank is not None:
                    ranked.append(((rank, -downloads(entry.address), docs[i].order), entry))
            ranked.sort(key=lambda pair: pair[0])
            return [entry for _, entry in ranked]

        return self.remembered(("search", q, tuple(words), *memo_key), make)

    def containing(self, q: str) -> set[int]:
        """Positions of the entries whose name, namespace, system, description or a topic contains `q`."""
        if not q:
            return set()
        return {i for i, text in enumerate(self.haystacks) if q in text}

    def every_word(self, words: list[str]) -> set[int]:
        """Positions of the entries where every word is found (fields or README words).

        The longest word first (usually the rarest); each next word is only looked for among
        the entries the previous ones left, so a query costs at most words x entries checks.
        """
        texts = self.haystacks
        found: set[int] | None = None
        for word in sorted(words, key=len, reverse=True):
            readme = self.in_readme(word)
            if found is None:
                found = {i for i, text in enumerate(texts) if word in text} | readme
            else:
                found = (found & readme) | {i for i in found - readme if word in texts[i]}
            if not found:
                break
        return found or set()

    def in_readme(self, word: str) -> set[int]:
        """Positions of the modules whose README has `word` (remembered for this generation, bounded)."""
        cached = self.readme_memo.get(word)
        if cached is not None:
            self.readme_memo.move_to_end(word)
            return cached
        # By identity first: the index's README sets mostly hold the very address objects of its
        # entries (alive, so no two share an id), and an id is hashed 10x faster than an address.
        by_id, position = self.position_by_id, self.position
        found = set()
        for a in self.readme.get(word, ()):
            p = by_id.get(id(a))
            if p is None:
                p = position.get(a)
            if p is not None:
                found.add(p)
        self.readme_memo[word] = found
        self.readme_memo_size += len(found) + 1
        while self.readme_memo_size > README_MEMO_POSITIONS:
            _, dropped = self.readme_memo.popitem(last=False)
            self.readme_memo_size -= len(dropped) + 1
        return found
