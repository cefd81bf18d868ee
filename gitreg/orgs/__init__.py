"""Org mode: GitLab groups and GitHub organizations listed through their APIs and served as modules.

- `catalog`: `OrgCatalog`, the one facade: the listing (address -> `OrgRepo`) requests read,
  resolution into a synthetic rule, repository webhooks applied, subscribers told of changes.
- `combine`: the orgs' claims combined into one listing, each address served by its owner
  (`owners`: who holds each address), computed on a thread from a snapshot.
- `patch`: a repository webhook's change to one org's listing, settled against the owners and
  installed for the few addresses it touches (the listing is not combined again).
- `model`: the data (`OrgRepo`, `OrgChanges`, `OrgReport`, per-org `OrgState`) and `evaluate`,
  the rule that turns a host's repository records into modules.
- `refresh`: each org's enumeration through its host's API client, and its background schedule.
- `store`: orgs.json, the last good listings, read at start and written when they change.
- `probe`: `gitreg check --probe`, every org enumerated once without persisting anything.

Host specifics (URLs, fields, payloads, which repositories a group owns) are the forges'.

May import: `gitreg.core`, `gitreg.config`, `gitreg.forges`, `gitreg.storage`.
"""
