"""The `terraform init` path: address -> rule or org (`resolve`, the one resolver) -> cached tags
(`tags`) -> versions and download locations (`service`, the protocol's facade); which modules
are listed and their download counts (`catalog`); "repositories changed" (`publish`).

May import: everything below it (core, config, git, forges, storage, replicas, orgs).
"""
