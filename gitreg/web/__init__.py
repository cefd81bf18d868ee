"""The HTTP face: the application factory (`app`: HTTP wired to the composition root's services,
gitreg/services), typed app keys (`keys`), the request wrappers with the one error renderer
(`routing`), the rules each route declares (`route_rules`), the request's parsed module
address (`address`), authentication (`auth`: the caller recorded, asked of the identity door),
signed archive URLs, the listening socket, the JSON APIs (`api`) and the module pages (`pages`).

May import: every package below it, and of `gitreg.identity` only its door (`identity.door`:
an import-linter contract); nothing imports it but `gitreg.cli`.
"""
