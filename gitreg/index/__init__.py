"""The browse index: what list, search and the pages answer from, built in the background
(`store`), module details read from tagged trees (`details`) by parse workers in child
processes (`parse_workers`), and the index process that builds it (`process`).

May import: everything below it (core ... registry).
"""
