"""Command line: `gitreg serve`, `gitreg check` and `gitreg tokens`. Returns exit codes; logging is set up here only."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import ssl
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gitreg import __version__
from gitreg.cli import tokens
from gitreg.cli.declared import probe_declaration
from gitreg.cli.server import ListenError, run_server
from gitreg.config.model import Config, ModuleRule
from gitreg.config.parse import load_config, module_rule_from_flag
from gitreg.config.rules import shadowed_rules
from gitreg.core.errors import BadRequest, ConfigError, GitregError, ModuleNotFound
from gitreg.core.loop import run_main
from gitreg.core.names import parse_address
from gitreg.core.urls import mask as mask_url
from gitreg.core.versions import select_versions
from gitreg.git.remote import GitAdapter
from gitreg.git.runner import GIT_MISSING, GitRunner, git_found
from gitreg.observability.setup import configure_logging

log = logging.getLogger("gitreg")

EXIT_OK = 0
EXIT_PROBE_FAILED = 1
EXIT_CONFIG = 2
# `gitreg --help`'s summary of the README's exit-code table (tests/cli/test_quickstart.py compares them).
EXIT_CODES = """exit codes:
  0  check: the config is valid (with --probe: every repository was listed); serve, demo: stopped by SIGTERM/SIGINT
  1  check --probe: a repository could not be listed or a configured module has no SemVer tag;
     check with [cache] backend = "redis": Redis does not answer; serve --workers N: a worker died
  2  the config is invalid or unreadable, or serve or demo cannot start (a port in use, a storage path
     that is not a directory...; check runs the same start checks): one line per problem on stderr"""
_WITH_EXIT_CODES: dict[str, Any] = {"epilog": EXIT_CODES, "formatter_class": argparse.RawDescriptionHelpFormatter}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gitreg",
        description="A Terraform/OpenTofu module registry served from Git tags.",
        **_WITH_EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"gitreg {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", metavar="PATH", help="TOML config (default: $GITREG_CONFIG, then ./gitreg.toml)")
        p.add_argument(
            "--module",
            action="append",
            default=[],
            metavar="NAMESPACE/NAME/SYSTEM=REPOSITORY_URL",
            help="serve one module from a repository (repeatable; adds to the config file's rules)",
        )
        p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    serve = sub.add_parser("serve", help="run the registry server", **_WITH_EXIT_CODES)
    common(serve)
    serve.add_argument("--host", help="listen address (overrides [server] host)")
    serve.add_argument("--port", type=int, help="listen port (overrides [server] port)")
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text (access log in the combined log format) or json (one JSON object per line)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help='N worker processes on one port (needs [cache] backend = "redis" when N > 1)',
    )

    _add_demo(sub)

    check = sub.add_parser(
        "check", help="validate the config; exit 0, or print every problem and exit 2", **_WITH_EXIT_CODES
    )
    common(check)
    check.add_argument(
        "--probe",
        nargs="?",
        const=True,
        default=None,
        metavar="NAMESPACE/NAME/SYSTEM",
        help="also list each explicit module's versions and skipped tags (and each provider's served and refused "
        "releases); with an address, probe that one module through whichever rule serves it (wildcard rules too); "
        "with NAMESPACE/TYPE, that one provider",
    )
    tokens.add_parser(sub, common)
    return parser


def _add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="build a tagged demo module, serve it and print the `terraform init` that installs it",
        description="Build a tagged demo repository (demo/hello/null), serve it and print the exact\n"
        "`terraform init` command that installs it and the module browser's URL. Ctrl-C stops it\n"
        "and removes what it made (unless --dir). Uses no config file and not your [storage] path.",
        **_WITH_EXIT_CODES,
    )
    demo.add_argument("--dir", metavar="DIR", help="build the demo in DIR and keep it (default: a temporary directory)")
    demo.add_argument(
        "--no-serve", action="store_true", help="with --dir: build the demo there, print how to serve it, and exit"
    )
    demo.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    demo.add_argument("--port", type=int, default=8080, help="listen port (default 8080; 0: any free port)")
    demo.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def config_path(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The config file: --config, else $GITREG_CONFIG, else ./gitreg.toml when there is one."""
    path: str | None = args.config or env.get("GITREG_CONFIG") or None
    if path is None and Path("gitreg.toml").is_file():
        path = "gitreg.toml"
    return path


def resolve_config(args: argparse.Namespace, env: Mapping[str, str]) -> Config:
    """The config from --config, $GITREG_CONFIG or ./gitreg.toml (or none), plus --module rules."""
    path = config_path(args, env)
    config = load_config(path, env) if path is not None else Config()
    problems: list[str] = []
    extra = []
    for value in args.module:
        try:
            extra.append(module_rule_from_flag(value, config.git.protocols))
        except ConfigError as e:
            problems.extend(e.problems)
    if problems:
        raise ConfigError(problems)
    # Command-line modules come first so they win over a file rule of the same specificity.
    config = dataclasses.replace(config, modules=(*extra, *config.modules))
    server = config.server
    if getattr(args, "host", None):
        server = dataclasses.replace(server, host=args.host)
    if getattr(args, "port", None) is not None:
        if not 0 <= args.port <= 65535:
            raise ConfigError([f"--port: must be between 0 and 65535, not {args.port}"])
        server = dataclasses.replace(server, port=args.port)
    return dataclasses.replace(config, server=server)


def module_sources(config: Config) -> int:
    """How many sources of modules (and providers) the config names: `serve` and `check` both refuse none."""
    return len(config.modules) + len(config.orgs) + len(config.providers)


def _refuse_nothing_to_serve(config: Config) -> bool:
    """Say so on stderr and return True when the config serves no module at all."""
    if module_sources(config):
        return False
    print(
        "gitreg: no modules to serve: add [[modules]] or [[orgs]] to the config or pass --module NS/NAME/SYSTEM=URL "
        "(examples/gitreg.toml is a starting point; `gitreg demo` serves a demo module)",
        file=sys.stderr,
    )
    return True


def prepare_storage(path: str) -> str | None:
    """Create `[storage] path` if needed; what is wrong with it (for `storage.path: ...`), or None."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"{path!r} exists and is not a directory"
    except NotADirectoryError:
        return f"{path!r} cannot be created: a part of it is a file, not a directory"
    except OSError as e:
        return f"{path!r} cannot be created: {e.strerror}"
    if not directory.is_dir():
        return f"{path!r} is not a directory"
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass  # mirrors, archives and records are written here
    except OSError as e:
        return f"{path!r} is not writable: {e.strerror}"
    return None


def start_checks(config: Config) -> tuple[ssl.SSLContext | None, list[str]]:
    """`serve`'s start checks, which `check` runs too: the TLS files load, `[storage] path` is
    creatable and writable, git is found. The TLS context (None without TLS) and each problem."""
    problems = []
    ssl_context = None
    if config.server.tls_cert and config.server.tls_key:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ssl_context.load_cert_chain(config.server.tls_cert, config.server.tls_key)
        except (OSError, ssl.SSLError) as e:
            problems.append(f"server.tls_cert/tls_key: cannot load: {e}")
    # Checked before anything starts, so the message names the storage and not the listener.
    problem = prepare_storage(config.storage.path)
    if problem is not None:
        problems.append(f"storage.path: {problem}")
    if not git_found():
        problems.append(f"git: {GIT_MISSING}; gitreg runs git for every module")
    return ssl_context, problems


def _refuse_start_problems(problems: list[str]) -> bool:
    for problem in problems:
        print(f"gitreg: {problem}", file=sys.stderr)
    return bool(problems)


def _serve(config: Config, workers: int = 1) -> int:
    if _refuse_nothing_to_serve(config):
        return EXIT_CONFIG
    if workers < 1:
        print(f"gitreg: --workers must be at least 1, not {workers}", file=sys.stderr)
        return EXIT_CONFIG
    if workers > 1 and config.cache.backend != "redis":
        print(
            f'gitreg: --workers {workers} needs [cache] backend = "redis": with "memory" each worker would have '
            "its own tag cache, download counts and moved-tag records, and a webhook would reach only one of them",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    ssl_context, problems = start_checks(config)
    if _refuse_start_problems(problems):
        return EXIT_CONFIG
    try:
        if workers > 1:
            from gitreg.cli.workers import run_workers

            return run_workers(config, workers, lambda cfg: run_main(run_server(cfg, ssl_context, reuse_port=True)))
        run_main(run_server(config, ssl_context))
    except ListenError as e:
        print(f"gitreg: cannot listen on {config.server.host}:{config.server.port}: {e.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as e:  # the app's start-up (storage, executor) failed after the checks above
        where = f" ({e.filename})" if e.filename else ""
        print(f"gitreg: cannot start: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    """`gitreg demo`: build the demo, serve it until Ctrl-C, say what to run and what stays behind."""
    from gitreg.cli.demo import ADDRESS, HOST, DemoError, prepare
    from gitreg.config.model import ServerConfig, StorageConfig

    problem = None if 0 <= args.port <= 65535 else f"--port: must be between 0 and 65535, not {args.port}"
    if args.no_serve and args.dir is None:
        problem = "--no-serve needs --dir (a temporary demo would be removed at once)"
    demo = None
    try:
        demo = prepare(args.dir, Config().git) if problem is None else None
    except DemoError as e:
        problem = str(e)
    if demo is None:
        print(f"gitreg: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    if args.no_serve:
        print(f"gitreg demo: built {ADDRESS} in {demo.repository}; serve it with:\n")
        print(f"  gitreg serve --module {ADDRESS}={demo.url}")
        return EXIT_OK
    config = dataclasses.replace(
        Config(),
        server=ServerConfig(
            host=args.host, port=args.port, registry_host=HOST
        ),  # the pages' blocks: the CLI config's host
        storage=StorageConfig(path=str(demo.storage)),
        modules=(module_rule_from_flag(f"{ADDRESS}={demo.url}"),),
    )

    def serving(url: str) -> None:
        print(
            f"gitreg demo: serving {ADDRESS} (tags v1.0.0, v1.1.0, v1.2.0, v2.0.0-rc.1) from {demo.url}\n\n"
            f"In another shell, install it with Terraform (or OpenTofu: tofu init):\n\n"
            f"  {demo.point_terraform_at(url)}\n\n"
            f"The module browser: {url}/\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )

    try:
        run_main(run_server(config, None, on_serving=serving))
    except ListenError as e:
        print(f"gitreg: cannot listen on {args.host}:{args.port}: {e.strerror} (try --port 0)", file=sys.stderr)
        return EXIT_CONFIG
    finally:
        print(f"gitreg demo: stopped; {demo.clean_up()}", flush=True)
    return EXIT_OK


def _rule_labels(config: Config, flag_rules: int) -> list[str]:
    """How the operator wrote each rule: `--module ADDRESS` (they come first) or `modules[i]` of the file."""
    return [
        f"--module {_pattern(rule)}" if i < flag_rules else f"modules[{i - flag_rules}]"
        for i, rule in enumerate(config.modules)
    ]


def _pattern(rule: ModuleRule) -> str:
    return rule.pattern


def _check(config: Config, probe: bool | str | None, flag_rules: int = 0) -> int:
    if _refuse_nothing_to_serve(config) or _refuse_start_problems(start_checks(config)[1]):
        return EXIT_CONFIG  # what serve would refuse (#33)
    labels = _rule_labels(config, flag_rules)
    print(
        f"config OK: {len(config.modules)} module rule(s), {len(config.credentials)} credential(s)"
        + (f", {len(config.orgs)} org(s)" if config.orgs else "")
        + (f", {len(config.providers)} provider rule(s)" if config.providers else "")
        + (f" from {config.source}" if config.source else "")
    )
    for hidden, winner in shadowed_rules(config.modules):
        print(
            f"warning: {labels[hidden]} ({_pattern(config.modules[hidden])}) never serves anything: "
            f"{labels[winner]} has the same namespace, name and system and wins",
            file=sys.stderr,
        )
    from gitreg.web.api.webhooks import webhook_instructions  # imports aiohttp: only `check` needs it here

    for line in webhook_instructions(config):
        print(line)
    if config.cache.backend == "redis" and not _report_redis(config):
        return EXIT_PROBE_FAILED
    if not probe:
        return EXIT_OK
    with tempfile.TemporaryDirectory(prefix="gitreg-home-") as home:
        adapter = GitAdapter(GitRunner(config.git, config.credentials, home))
        if isinstance(probe, str) and probe.count("/") == 1 and config.providers:  # NAMESPACE/TYPE: a provider
            namespace, type_ = probe.split("/")
            return _probe_providers(config, (namespace, type_))
        if isinstance(probe, str):
            return _probe_address(config, adapter, probe, labels)
        failed = _probe(config, adapter)
        return max(failed, _probe_orgs(config, adapter), _probe_providers(config))


def _report_redis(config: Config) -> bool:
    """With backend = "redis": PING it briefly and say whether it answered (the password masked)."""
    from gitreg.replicas.connection import check_redis

    assert config.cache.redis_url is not None  # required with backend = "redis"
    shown = mask_url(config.cache.redis_url)
    problem = run_main(check_redis(config.cache.redis_url))
    if problem is not None:
        print(
            f"error: cache.redis_url: redis at {shown} does not answer: {problem} "
            "(`gitreg serve` would start anyway, each replica serving from its own memory until Redis answers)",
            file=sys.stderr,
        )
        return False
    print(f"redis: {shown} answers; replicas share tag lists, invalidations, download counts, pins and the index")
    return True


def _probe(config: Config, adapter: GitAdapter) -> int:
    failed = False
    for i, rule in enumerate(config.modules):
        if not rule.explicit:
            print(
                f"\nrule {i}: {_pattern(rule)} -> "
                f"{mask_url(rule.repository)} "
                "(a wildcard rule: probe one of its modules with --probe NAMESPACE/NAME/SYSTEM)"
            )
            continue
        print(
            f"\n{rule.namespace}/{rule.name}/{rule.system} <- {mask_url(rule.repository)}"
            + (f" path={rule.path}" if rule.path else "")
            + (f" tag_prefix={rule.tag_prefix}" if rule.tag_prefix else "")
        )
        failed |= not _probe_repository(adapter, rule.repository, rule.tag_prefix, rule.path)
    return EXIT_PROBE_FAILED if failed else EXIT_OK


def _probe_address(config: Config, adapter: GitAdapter, text: str, labels: list[str]) -> int:
    """Probe one module address through the rule that serves it, as a request for it would."""
    parts = text.split("/")
    try:
        if len(parts) != 3:
            raise BadRequest(f"--probe {text[:200]!r}: expected NAMESPACE/NAME/SYSTEM")
        address = parse_address(*parts)
    except GitregError as e:
        print(f"gitreg: {e.message}", file=sys.stderr)
        return EXIT_CONFIG
    # These import aiohttp: only a probe of one address needs them.
    from gitreg.orgs.probe import enumerate_orgs
    from gitreg.orgs.service import OrgCatalog
    from gitreg.registry.resolve import Resolver

    # The choice a request makes (Resolver); the orgs are listed only when one may serve it.
    orgs = OrgCatalog(config, None)
    resolver = Resolver(config, orgs)
    key = (address.namespace, address.name, address.system)
    if key not in resolver.rules.explicit and orgs.serves_namespace(address.namespace):
        run_main(enumerate_orgs(config, orgs))
    try:
        resolved = resolver.resolve(address)
    except ModuleNotFound:
        if orgs.serves_namespace(address.namespace):
            print(
                f"\n{address}: namespace {address.namespace} is an org's, and its listing has no such module "
                "(a request for it gets 404; `gitreg check --probe` lists the org)"
            )
        else:
            print(f"\n{address}: no rule serves it (a request for it gets 404)")
        return EXIT_PROBE_FAILED
    repo = orgs.get(address)
    if repo is not None:
        print(f"\n{address} <- {repo.full_name} ({mask_url(repo.repository)}, org {config.orgs[repo.org].label})")
        return EXIT_OK if _probe_repository(adapter, repo.repository, "") else EXIT_PROBE_FAILED
    rule = resolved.rule
    label = labels[config.modules.index(rule)]
    print(
        f"\n{address} <- {mask_url(resolved.repository)} (rule {label}: {_pattern(rule)})"
        + (f" path={rule.path}" if rule.path else "")
        + (f" tag_prefix={rule.tag_prefix}" if rule.tag_prefix else "")
    )
    return EXIT_OK if _probe_repository(adapter, resolved.repository, rule.tag_prefix, rule.path) else EXIT_PROBE_FAILED


def _probe_repository(adapter: GitAdapter, repository: str, tag_prefix: str, path: str = "") -> bool:
    """Print the versions and skipped tags of one repository, and what its .gitreg.toml declares;
    False when it cannot be listed, has no version, or its .gitreg.toml is malformed."""
    try:
        tags = adapter.ls_remote_tags(repository)
    except GitregError as e:
        print(f"  ERROR: {e.message}")
        return False
    found = select_versions(tags.tags, tag_prefix)
    if found.versions:
        print(f"  versions ({len(found.versions)}): " + ", ".join(tv.canonical for tv in found.versions))
        latest = found.latest()
        if latest is not None:
            print(f"  latest: {latest.canonical} (tag {latest.tag}, commit {latest.sha[:12]})")
    else:
        # Nothing to serve: `terraform init` of it would fail, so the probe does (exit 1).
        print(f"  ERROR: no SemVer tag yet: nothing to serve (push a tag like {tag_prefix}v1.0.0)")
    for skipped in found.skipped:
        print(f"  skipped tag {skipped.tag!r}: {skipped.reason}")
    declared_ok = probe_declaration(adapter, repository, tags.head, path, found.versions)
    return bool(found.versions) and declared_ok


def _probe_providers(config: Config, only: tuple[str, str] | None = None) -> int:
    """Per provider: the versions served from its releases, and each release refused with its reason."""
    if not config.providers:
        return EXIT_OK
    from gitreg.providers.probe import probe_providers  # imports aiohttp: only `check --probe` needs it

    failed = False
    for report in run_main(probe_providers(config, only)):
        print(f"\nprovider {report.namespace}/{report.type} <- {mask_url(report.repository)}")
        if report.error is not None:
            failed = True
            print(f"  ERROR: {report.error}")
            continue
        for v in report.versions:
            platforms = ", ".join(f"{p.os}_{p.arch}" for p in v.packages)
            print(f"  {v.version}: protocols {', '.join(v.protocols)}; {platforms}; signed by key {v.key_id}")
        for refused in report.refused:
            print(f"  not served: release {refused.tag}: {refused.reason}")
        if not report.versions:
            failed = True
            print("  ERROR: no release is served (publish a signed goreleaser release like v1.0.0)")
    if only is None and any(r.type is None for r in config.providers):
        print('(a provider rule with type = "*": probe one of its providers with --probe NAMESPACE/TYPE)')
    return EXIT_PROBE_FAILED if failed else EXIT_OK


def _probe_orgs(config: Config, adapter: GitAdapter) -> int:
    """Per org: the repositories its API lists, the modules they became (with versions), the rest and why."""
    if not config.orgs:
        return EXIT_OK
    from gitreg.orgs.probe import probe_orgs  # imports aiohttp: only `check --probe` with orgs needs it

    reports = run_main(probe_orgs(config))
    failed = False
    for report in reports:
        org = report.org
        print(f"\norg {org.label} ({org.api_url}) -> namespace {org.namespace}")
        if report.error is not None:
            failed = True
            print(f"  ERROR: {report.error}")
            continue
        lines, ignored = [], list(report.ignored)
        for repo in report.modules:
            try:
                tags = adapter.ls_remote_tags(repo.repository)
            except GitregError as e:
                failed = True
                lines += [f"  module {repo.address} <- {repo.full_name} ({mask_url(repo.repository)})"]
                lines += [f"    ERROR: {e.message}"]
                continue
            found = select_versions(tags.tags, "")
            if not found.versions:  # not served until it has one; not an error of the org's
                ignored.append((repo.full_name, "no SemVer tag (push a tag like v1.0.0)"))
                continue
            shown = ", ".join(tv.canonical for tv in found.versions[:10]) + (
                ", ..." if len(found.versions) > 10 else ""
            )
            lines += [f"  module {repo.address} <- {repo.full_name} ({mask_url(repo.repository)})"]
            lines += [f"    versions ({len(found.versions)}): {shown}"]
        modules = len(report.modules) - (len(ignored) - len(report.ignored))
        print(f"  {report.found} repositories found, {modules} module(s), {len(ignored)} ignored")
        print("\n".join([*lines, *(f"  ignored {full_name}: {reason}" for full_name, reason in ignored)]))
    return EXIT_PROBE_FAILED if failed else EXIT_OK


def _report_config_error(error: ConfigError, path: str | None) -> None:
    """Every problem on stderr, under the file's name; what to do about `${VAR}`s that are not set."""
    print(f"gitreg: invalid configuration{f' ({path})' if path else ''}:", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)
    unset = sorted({m.group(1) for p in error.problems if (m := _UNSET_RE.search(p))})
    if unset:
        print(
            f"  (a ${{VAR}} is read from gitreg's environment: export {'=..., '.join(unset)}=... before running "
            f"gitreg, or write the value{'s' if len(unset) > 1 else ''} in {path or 'the file'})",
            file=sys.stderr,
        )


_UNSET_RE = re.compile(r"environment variable (\w+) is not set")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `gitreg` and `python -m gitreg`; returns the exit code."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at interpreter exit, so a closed pipe is caught below
    except BrokenPipeError:
        # `gitreg check | head -1`: the reader has gone, which is not an error worth a traceback.
        # Point stdout at /dev/null so the interpreter's own final flush stays quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PROBE_FAILED
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(
        getattr(logging, args.log_level.upper()), getattr(args, "log_format", "text"), args.command == "serve"
    )
    if args.command == "demo":
        return _demo(args)
    try:
        config = resolve_config(args, os.environ)
    except ConfigError as e:
        _report_config_error(e, config_path(args, os.environ))
        return EXIT_CONFIG
    if args.command == "check":
        return _check(config, args.probe, flag_rules=len(args.module))
    if args.command == "tokens":
        return tokens.run(config, args)
    return _serve(config, args.workers)
