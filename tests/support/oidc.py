"""A fake OIDC issuer (a CI system's): discovery, a JWKS, and a `sign` helper for the test's JWTs.

Shaped like GitLab's (`/.well-known/openid-configuration` naming `jwks_uri` =
`<issuer>/oauth/discovery/keys`; ID tokens with `namespace_path`, `project_path`, `ref`...) and
GitHub Actions' (`repository`, `repository_owner`, `job_workflow_ref`). Keys are real RSA and EC
keys made with cryptography; `other` is a key the JWKS never publishes (an attacker's). Every
request is counted by path. Runs in the test's loop (`await start()`) or a thread (`in_thread()`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
from typing import Any, Self

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.support.forges import FakeServer

AUDIENCE = "https://registry.example.test"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class FakeIssuer(FakeServer):
    """An OIDC issuer: an RSA key (`rsa`, kid rsa-1), an EC P-256 key (`ec`, kid ec-1), an unpublished `other`."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1()),
            "other": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        }
        self.kids = {"rsa": "rsa-1", "ec": "ec-1", "other": "rsa-1"}  # `other` claims a published kid
        self.published = ["rsa", "ec"]
        self.jwks_host = ""  # set: discovery names a jwks_uri on this base URL instead of the issuer's
        self.mode = "ok"  # or "down": 503 for everything, or "slow": every answer 12 s late
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.issuer = ""

    # ---- tokens ------------------------------------------------------------------------------

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """A GitLab CI ID token's claims for project acme/infra on main, valid for 5 minutes."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "namespace_id": "72",
            "namespace_path": "acme",
            "project_id": "20",
            "project_path": "acme/infra",
            "user_id": "5",
            "user_login": "alice",
            "pipeline_id": "1212",
            "pipeline_source": "push",
            "job_id": "3434",
            "ref": "main",
            "ref_type": "branch",
            "ref_protected": "true",
            "jti": "b5bb6e3c-0d3b-4f1b-9a7e-6d8c1a2b3c4d",
            "iss": self.issuer,
            "iat": now,
            "nbf": now - 5,
            "exp": now + 300,
            "sub": "project_path:acme/infra:ref_type:branch:ref:main",
            "aud": AUDIENCE,
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def sign(self, claims: dict[str, Any], key: str = "rsa", alg: str | None = None, kid: str | None = None) -> str:
        """`claims` signed with key `key` (RS256 for RSA, ES256 for EC unless `alg`), header kid `kid`."""
        algorithm = alg or ("ES256" if key == "ec" else "RS256")
        return jwt.encode(claims, self.keys[key], algorithm=algorithm, headers={"kid": kid or self.kids[key]})

    def unsigned(self, claims: dict[str, Any]) -> str:
        """`alg: none`: no signature at all."""
        header = {"alg": "none", "typ": "JWT", "kid": "rsa-1"}
        return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}."

    def hs256_with_public_key(self, claims: dict[str, Any]) -> str:
        """The key-confusion attack: HS256, keyed with the published RSA key's PEM (which anyone has)."""
        header = {"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        pem = (
            self.keys["rsa"]
            .public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return f"{signing}.{_b64(hmac.new(pem, signing.encode(), hashlib.sha256).digest())}"

    # ---- serving -----------------------------------------------------------------------------

    def _jwks(self) -> dict[str, Any]:
        keys = []
        for name in self.published:
            public = self.keys[name].public_key()
            algorithm = jwt.algorithms.ECAlgorithm if name == "ec" else jwt.algorithms.RSAAlgorithm
            jwk = json.loads(algorithm.to_jwk(public))
            jwk.update(kid=self.kids[name], use="sig", alg="ES256" if name == "ec" else "RS256")
            keys.append(jwk)
        return {"keys": keys}

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self._lock:
            self.counts[request.path] = self.counts.get(request.path, 0) + 1
        if self.mode == "down":
            return web.Response(status=503, text="down")
        if self.mode == "slow":  # answers, but after longer than Terraform waits (10 s)
            await asyncio.sleep(12)
        response: web.StreamResponse = await handler(request)
        return response

    async def _discovery(self, request: web.Request) -> web.Response:
        base = self.jwks_host or self.issuer
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/oauth/authorize",
                "token_endpoint": f"{self.issuer}/oauth/token",
                "jwks_uri": f"{base}/oauth/discovery/keys",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        return web.json_response(self._jwks())

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/oauth/discovery/keys", self._keys)
        return app

    async def start(self) -> Self:
        """Serve on 127.0.0.1 (a free port) in the running event loop; `issuer` is its URL."""
        self.issuer = await self.serve()
        return self
