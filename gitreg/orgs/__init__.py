"""Org mode: GitLab groups and GitHub organizations listed through their APIs and served as modules.

- `service`: `OrgCatalog`, the one facade the rest of gitreg asks: reading, loading,
  enumerating, webhooks, each handed to the room below that does it.
- `listing`: the served listing (address -> `OrgRepo`) requests read, resolution into a
  synthetic rule, and every install into it, subscribers told of each change.
- `rebuild`: one rebuild at a time of the combined listing, computed on a thread from a
  snapshot (what enumerations, orgs.json and adopted owners feed).
- `repo_events`: repository webhooks, as hints: the repository read again from the API and
  patched into the listing.
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
