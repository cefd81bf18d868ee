"""The HTTP face: the application factory (`app`), typed app keys, authentication, signed
archive URLs, the listening socket, the JSON APIs (`api`) and the module pages (`pages`).

May import: every package below it; nothing imports it but `gitreg.cli`.
"""
