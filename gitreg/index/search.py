"""Listing and search over one generation of the index: query matching, ranking, and remembered answers.

A generation (`View`) is built once per change of the index; lists and searches of a generation
are remembered (bounded), so a warm list or search is a dictionary lookup and a slice.
"""

from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from gitreg.core.names import ModuleAddress
from gitreg.index.model import IndexEntry

# README words kept per module for search (distinct, lowercased).
MAX_WORDS = 2000
# Search answers remembered per index generation (a new generation forgets them all).
SEARCH_MEMO = 256
_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_-]{1,39}")


def readme_words(readme: str) -> str:
    """The distinct words of a README (lowercased, in order of first use), for search."""
    seen: dict[str, None] = {}
    for word in _WORD_RE.findall(readme.casefold()):
        seen.setdefault(word, None)
        if len(seen) >= MAX_WORDS:
            break
    return " ".join(seen)


def search_rank(query: str, entry: IndexEntry, readme: Callable[[str], bool] | None = None) -> int | None:
    """Lower is better; None when the module does not match.

    0 the name is the query; 1 the name starts with it; 2 the name contains it (or every
    word of it); 3 the namespace, system or a topic is it, or `namespace/name/system` contains
    it; 4 the description contains it; 5 every word appears somewhere (in the name, namespace,
    system, description or topics, or as a word of the README: `readme(word)`).
    """
    q = query.casefold()
    a = entry.address
    name, namespace, system = a.name.casefold(), a.namespace.casefold(), a.system
    words = _words(q)
    if name == q:
        return 0
    if name.startswith(q):
        return 1
    if q in name or (len(words) > 1 and all(w in name for w in words)):
        return 2
    topics = [t.casefold() for t in entry.topics]
    if q in (namespace, system) or q in topics or q in f"{namespace}/{name}/{system}":
        return 3
    text = entry.description.casefold()
    if q in text:
        return 4
    haystack = f"{namespace}/{name}/{system} {text} {' '.join(topics)}"
    in_readme = readme or (lambda w: f" {w} " in f" {entry.words} ")
    if words and all(w in haystack or in_readme(w) for w in words):
        return 5
    return None


def _words(query: str) -> list[str]:
    return [w for w in re.split(r"[\s/]+", query) if w]


class _Blob:
    """One short text per entry, joined, so `str.find` (C speed) finds the entries containing a string."""

    def __init__(self, texts: Iterable[str]) -> None:
        parts: list[str] = []
        self.starts: list[int] = []
        offset = 0
        for text in texts:
            self.starts.append(offset)
            clean = text.replace("\n", " ")
            parts.append(clean)
            offset += len(clean) + 1
        self.text = "\n".join(parts)

    def matching(self, needle: str) -> set[int]:
        """Indexes of the entries whose text contains `needle`."""
        found: set[int] = set()
        if not needle or "\n" in needle:
            return found
        pos = self.text.find(needle)
        while pos >= 0:
            i = bisect.bisect_right(self.starts, pos) - 1
            found.add(i)
            nxt = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.text)
            pos = self.text.find(needle, nxt)
        return found


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
        self.ids = _Blob(str(e.address).casefold() for e in self.ordered)
        self.texts = _Blob(f"{e.description} {' '.join(e.topics)}".casefold() for e in self.ordered)
        self.position = {e.address: i for i, e in enumerate(self.ordered)}
        self.readme = readme  # word -> modules whose README has it (kept by the index as it changes)
        self.memo: OrderedDict[tuple[object, ...], list[IndexEntry]] = OrderedDict()

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

        def make() -> list[IndexEntry]:
            ranked = []
            for entry in self.candidates(query):
                if not keep(entry):
                    continue
                address = entry.address

                def in_readme(word: str, address: ModuleAddress = address) -> bool:
                    return address in self.readme.get(word, ())

                rank = search_rank(query, entry, in_readme)
                if rank is not None:
                    ranked.append(((rank, -downloads(entry.address), str(entry.address)), entry))
            ranked.sort(key=lambda pair: pair[0])
            return [entry for _, entry in ranked]

        return self.remembered(("search", query.casefold(), *memo_key), make)

    def candidates(self, query: str) -> list[IndexEntry]:
        """Entries that may match `query`; search_rank decides (and orders)."""
        q = query.casefold()
        words = _words(q)
        if not words:
            return []
        hits = self.ids.matching(q) | self.texts.matching(q)
        common: set[int] | None = None
        for word in words:
            found = self.ids.matching(word) | self.texts.matching(word) | self.in_readme(word)
            common = found if common is None else common & found
            if not common:
                break
        hits |= common or set()
        return [self.ordered[i] for i in sorted(hits)]

    def in_readme(self, word: str) -> set[int]:
        """Positions of the modules whose README has `word`."""
        position = self.position
        return {position[a] for a in self.readme.get(word, ()) if a in position}
