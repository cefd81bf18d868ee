"""What a principal may see in lists, search and pages: decided here, once, for every listing.

Static tokens and CI jobs (OIDC) see by namespace, as `[auth] tokens` always did. A Git host's
identity (a forge token, or a `terraform login` token standing for one) sees the modules whose
repository is on that host and among the repositories the host listed for it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gitreg.core import urls


@functools.lru_cache(maxsize=65536)
def repository_path(repository: str) -> tuple[str, str] | None:
    """(host, project path) of a repository URL: the URL's path without `.git`, lowercased; None if not a URL.

    The GitLab project path (`group/sub/project`) or GitHub `owner/repo` of the repository a
    module is served from; `host` is lowercased and without port or user.
    """
    found = urls.parse(repository.strip())
    if found is None or found.scheme == "file" or not found.host:
        return None
    path = found.path.strip("/").removesuffix(".git").strip("/")
    if not path or "//" in path:
        return None
    return found.host, path.lower()


@dataclass(frozen=True)
class Visibility:
    """A predicate over (namespace, repository), hashable: lists remember their answers by it.

    `namespaces` None: every namespace. `hosts` None: any repository; else only repositories on
    one of `hosts` whose project path is in `paths`.
    """

    namespaces: frozenset[str] | None = None
    hosts: frozenset[str] | None = None
    paths: frozenset[str] = frozenset()

    def allows(self, namespace: str, repository: str) -> bool:
        """True when a module of `namespace` served from `repository` may be shown."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        if self.hosts is None:
            return True
        found = repository_path(repository)
        return found is not None and found[0] in self.hosts and found[1] in self.paths

    def allows_namespace(self, namespace: str) -> bool:
        """True when some module of `namespace` may be shown (its repositories decide the rest)."""
        return self.namespaces is None or namespace in self.namespaces

    @property
    def by_namespace(self) -> frozenset[str] | None:
        """The namespaces a listing may be narrowed to up front (None: no narrowing)."""
        return self.namespaces
