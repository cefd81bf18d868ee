"""Who is asking: the identities the Git host and the CI systems already give people and jobs.

Beside the static `[auth] tokens`, a bearer token may be a Git host's own token (`[[auth.forges]]`:
the host answers whether it can read the module's repository), a registry token issued by
`terraform login` through the host's OAuth (kept here as a digest only), or a CI system's OIDC
ID token (`[[auth.oidc]]`, verified against the issuer's JWKS). Each becomes one `Principal`;
what a principal may read is decided here, once, and the web layer asks the door (`door.py`,
`Identities`), the one module of this package it may import (an import-linter contract).

Imports: forges (the hosts' APIs), registry (which repository serves a module), replicas and
storage (issued tokens and access answers shared and kept), config and core. Never web.
"""
