"""Everything that knows a Git host's API: listings, webhook payloads, webhook signatures.

One module per host, beside what they share:
- `base`: the common API client (pages followed only on the API's own origin, rate limits
  waited out within a budget, bounded bodies, retries), `OrgStats`, `ForgeError` and `Host`,
  what the rest of gitreg asks of a host.
- `records`: `RepoRecord`, a repository as an API describes it, provider-neutral (and as
  orgs.json stores it).
- `payloads`: the provider-neutral webhook events (`TagEvent`, `RepositoryEvent`) and
  `MalformedPayload`.
- `github`, `gitlab`: the host's client (URLs, headers, record fields), its payloads turned
  into events, its deliveries' signature or token checked, and its `HOST`.
- `releases`: a repository's releases (`Release`, `ReleaseAsset` live in `records`): their
  pages, and an asset's bytes streamed (the token only to the API's origin, never to the storage
  host a download redirects to).
- `hosts`: the hosts by provider name, and `client_for`.
- `host_oauth`: the hosts' OAuth, gitreg as their client (authorize URL, code exchange, refresh,
  who the token is); the login flow that uses it is identity's (identity/oauth.py).

What others send is a hint: a webhook names a repository, and the org listing (orgs) decides
whether it serves it. Nothing here keeps state between calls but a client's own counters.

Adding a host: write `forges/<host>.py` (a `ForgeClient` subclass, `record`, `tag_event`,
`repository_event`, `verify`, `owns` and `HOST`), add its `HOST` to `hosts.HOSTS`, its name to
`config.model.Provider` (with its default API URL), and its webhook route in `web.api.webhooks`.

May import: `gitreg.core`, `gitreg.config`.
"""
