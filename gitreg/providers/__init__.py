"""Terraform providers served straight from a repository's releases (`[[providers]]`).

- `release`: what a release must hold, pure: goreleaser's file names, SHA256SUMS parsed, the
  manifest's protocols, `ProviderVersion` (a verified release) and `Refusal` (why one is not served).
- `keys`: the `keys` file's OpenPGP keys, and a signature over SHA256SUMS verified by `gpgv`
  (real gpg, in a GNUPGHOME of gitreg's own; never crypto of our own).
- `hashes`: a package's `h1:` (Go's dirhash over the zip's files), computed once and kept.
- `service`: `Providers`, the one facade: which rule serves `namespace/type`, the release list
  (cached like tag lists: TTL, in-flight de-duplication, stale on error), each release verified
  once and remembered, a package's bytes streamed from the Git host with its shasum checked.

May import: `gitreg.core`, `gitreg.config`, `gitreg.forges`, `gitreg.storage`.
"""
