"""`gitreg check --probe`: list what each rule, org and provider would serve, and why not."""

from __future__ import annotations

import sys

from gitreg.cli.archive_mode import MovedReport
from gitreg.cli.declared import declaration_lines, probe_declaration
from gitreg.cli.exits import EXIT_CONFIG, EXIT_OK, EXIT_PROBE_FAILED
from gitreg.config.model import Config, ModuleRule
from gitreg.core.errors import BadRequest, GitregError, ModuleNotFound
from gitreg.core.loop import run_main
from gitreg.core.names import parse_address
from gitreg.core.urls import mask as mask_url
from gitreg.core.versions import select_versions
from gitreg.git.remote import GitAdapter


def rule_pattern(rule: ModuleRule) -> str:
    return rule.pattern


def probe_rules(config: Config, adapter: GitAdapter) -> int:
    failed = False
    moved = MovedReport(config)
    for i, rule in enumerate(config.modules):
        if not rule.explicit:
            print(
                f"\nrule {i}: {rule_pattern(rule)} -> "
                f"{mask_url(rule.repository)} "
                "(a wildcard rule: probe one of its modules with --probe NAMESPACE/NAME/SYSTEM)"
            )
            continue
        print(
            f"\n{rule.namespace}/{rule.name}/{rule.system} <- {mask_url(rule.repository)}"
            + (f" path={rule.path}" if rule.path else "")
            + (f" tag_prefix={rule.tag_prefix}" if rule.tag_prefix else "")
        )
        failed |= not _probe_repository(adapter, rule.repository, rule.tag_prefix, moved, (config, rule), rule.path)
    return EXIT_PROBE_FAILED if failed else EXIT_OK


def probe_address(config: Config, adapter: GitAdapter, text: str, labels: list[str]) -> int:
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
        served = _probe_repository(adapter, repo.repository, "", MovedReport(config), (config, resolved.rule))
        return EXIT_OK if served else EXIT_PROBE_FAILED
    rule = resolved.rule
    label = labels[config.modules.index(rule)]
    print(
        f"\n{address} <- {mask_url(resolved.repository)} (rule {label}: {rule_pattern(rule)})"
        + (f" path={rule.path}" if rule.path else "")
        + (f" tag_prefix={rule.tag_prefix}" if rule.tag_prefix else "")
    )
    served = _probe_repository(
        adapter, resolved.repository, rule.tag_prefix, MovedReport(config), (config, rule), rule.path
    )
    return EXIT_OK if served else EXIT_PROBE_FAILED


def probe_consumers(config: Config, text: str) -> int:
    """`check --probe --consumers ADDRESS`: the orgs' repositories scanned once, the module's consumers printed."""
    from gitreg.usage.probe import consumers_report  # imports aiohttp: only this probe needs it

    lines, ok = run_main(consumers_report(config, text))
    if ok is None:  # not an address
        print(f"gitreg: {lines[0]}", file=sys.stderr)
        return EXIT_CONFIG
    print("\n" + "\n".join(lines))
    return EXIT_OK if ok else EXIT_PROBE_FAILED


def _probe_repository(
    adapter: GitAdapter,
    repository: str,
    tag_prefix: str,
    moved: MovedReport,
    signing: tuple[Config, ModuleRule] | None = None,
    path: str = "",
) -> bool:
    """Print the versions and skipped tags of one repository (and with [signing] keys, each version's
    signature); False when it cannot be listed or serves nothing."""
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
    for line in moved.lines(repository, tags.tags):
        print(line)
    declared_ok = probe_declaration(adapter, repository, tags.head, path, found.versions)
    if signing is not None and signing[0].signing.keys and found.versions:
        from gitreg.cli.signatures import signature_lines  # the registry's service: only a probe with keys needs it

        lines, served = signature_lines(signing[0], adapter, repository, signing[1].require_signed, found)
        print("\n".join(lines))
        return served and declared_ok
    return bool(found.versions) and declared_ok


def probe_providers(config: Config, only: tuple[str, str] | None = None) -> int:
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


def probe_orgs(config: Config, adapter: GitAdapter) -> int:
    """Per org: the repositories its API lists, the modules they became (with versions), the rest and why."""
    if not config.orgs:
        return EXIT_OK
    from gitreg.orgs.probe import probe_orgs  # imports aiohttp: only `check --probe` with orgs needs it

    reports = run_main(probe_orgs(config))
    failed, moved = False, MovedReport(config)
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
            lines += [f"    versions ({len(found.versions)}): {shown}", *moved.lines(repo.repository, tags.tags)]
            declared, declared_ok = declaration_lines(adapter, repo.repository, tags.head, "", found.versions)
            lines, failed = lines + [f"  {line}" for line in declared], failed or not declared_ok
            if config.signing.keys:
                from gitreg.cli.signatures import signature_lines  # only a probe with [signing] keys needs it

                signed, served = signature_lines(config, adapter, repo.repository, org.require_signed, found)
                lines, failed = lines + [f"  {line}" for line in signed], failed or not served
        modules = len(report.modules) - (len(ignored) - len(report.ignored))
        print(f"  {report.found} repositories found, {modules} module(s), {len(ignored)} ignored")
        print("\n".join([*lines, *(f"  ignored {full_name}: {reason}" for full_name, reason in ignored)]))
    return EXIT_PROBE_FAILED if failed else EXIT_OK
