"""gitreg: a Terraform and OpenTofu module registry that serves modules straight from Git tags.

Its packages, from the top down; each imports only those below it (`lint-imports` checks it,
CONTRIBUTING.md has the map): cli | indexer -> web -> observability -> index -> registry ->
orgs -> replicas -> storage -> forges | git -> config -> core.
"""

# The one place the version is written: pyproject.toml reads it (`dynamic = ["version"]`).
__version__ = "0.1.0"
