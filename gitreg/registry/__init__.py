"""The `terraform init` path: address -> rule or org -> cached tags (`tags`) -> versions and
download locations (`service`); which modules are listed and their download counts (`catalog`).

May import: everything below it (core, config, git, forges, storage, replicas, orgs).
"""
