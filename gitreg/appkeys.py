"""Typed keys for the state an application owns (no module-level singletons)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from .auth import TokenChecker
from .cache import TagCache
from .config import Config
from .git_adapter import GitAdapter
from .registry import Registry

CONFIG = web.AppKey("config", Config)
EXECUTOR = web.AppKey("executor", ThreadPoolExecutor)
GIT = web.AppKey("git", GitAdapter)
CACHE = web.AppKey("cache", TagCache)
REGISTRY = web.AppKey("registry", Registry)
AUTH = web.AppKey("auth", TokenChecker)
