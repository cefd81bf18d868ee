"""Terraform providers served straight from a repository's releases (`[[providers]]`).

- `release`: what a release must hold, pure: goreleaser's file names, SHA256SUMS parsed, the
  manifest's protocols, `ProviderVersion` (a verified release) and `Refusal` (why one is not served).
- `keys`: the `keys` file's OpenPGP keys, and a signature over SHA256SUMS verified by `gpgv`
  (real gpg, in a GNUPGHOME of gitreg's own; never crypto of our own).
- `hashes`: a package's `h1:` (Go's dirhash over the zip's files); `hashstore`: computed once per
  zip (in the parse workers the composition root hands in) and kept.
- `packages`: verified zips kept on disk by their SHA-256, within `[storage] max_bytes`: every
  download after a zip's first is that file, sent from disk.
- `fetches`: a zip's one fetch from the Git host into that store (started by the download answer,
  before the zip is asked for), followed by every zip request that arrives meanwhile: the bytes
  sent from the growing file, the last ones once the whole zip matched its signed SHA-256.
- `readme`: the README at a release's tag, read with git through gitreg's mirrors (BROWSE priority).
- `service`: `Providers`, the one facade: which rule serves `namespace/type`, the release list
  (cached like tag lists: TTL, in-flight de-duplication, stale on error), each release verified
  once and remembered, a package's bytes fetched from the Git host with its shasum checked and
  kept (fetches.py; streamed unkept when the disk has no room), the listing of the types `*` rules
  serve from the orgs' enumerated repositories.

May import: `gitreg.core`, `gitreg.config`, `gitreg.forges`, `gitreg.git`, `gitreg.storage`.
"""
