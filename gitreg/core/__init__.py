"""Pure vocabulary: errors, module addresses, versions, Git URLs, secret comparison.

Nothing here does I/O or knows aiohttp's server. May import: the standard library and small
parsing libraries only; nothing else of gitreg.
"""
