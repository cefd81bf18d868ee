""" "Used by": who uses a module, from the `.tf` files of the org's repositories and from CI installs.

- `model`: the vocabulary (`Consumer`, `Install`) shared by both halves.
- `installs`: `Installs`, the observed installs (a CI job's OIDC-authenticated downloads), kept
  90 days in storage and shared between replicas through Redis.

May import: `gitreg.index`, `gitreg.registry`, `gitreg.orgs`, `gitreg.replicas`, `gitreg.storage`,
`gitreg.forges`, `gitreg.git`, `gitreg.config`, `gitreg.core`.
"""
