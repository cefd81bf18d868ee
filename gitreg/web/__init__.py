"""The HTTP face: the application factory (`app`, the one composition root: a cleanup context
per resource), typed app keys (`keys`), the request wrappers with the one error renderer
(`routing`), the rules each route declares (`route_rules`), the request's parsed module
address (`address`), authentication, signed archive URLs, the listening socket, the JSON APIs
(`api`) and the module pages (`pages`).

May import: every package below it; nothing imports it but `gitreg.cli`.
"""
