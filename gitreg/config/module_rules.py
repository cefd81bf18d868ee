"""`[[modules]]`: the explicit rules, each a repository (URL template) serving one address or many.

Each table becomes a `ModuleRule` (`parse_rule`, also what `--module` is read into); its URLs
are checked by the one URL parser: a transport `[git] protocols` allows, no password, no token
as user name; `{placeholder}`s only where they may be filled. `check_download` is shared with
`[[orgs]]` (orgs.py).
"""

from __future__ import annotations

import re

from gitreg.config.model import (
    DOWNLOAD_PLACEHOLDERS,
    KNOWN_PROTOCOLS,
    PLACEHOLDERS,
    ModuleRule,
    Ref,
)
from gitreg.config.reader import TableReader, one_of
from gitreg.config.rules import TEMPLATE_RE
from gitreg.config.signing import read_require_signed
from gitreg.core import urls
from gitreg.core.names import NAME_RE, SYSTEM_RE


def check_placeholders(r: TableReader, key: str, template: str, allowed: tuple[str, ...]) -> None:
    """Every `{placeholder}` in `template` must be one of `allowed`."""
    for placeholder in TEMPLATE_RE.findall(template):
        if placeholder not in allowed:
            names = [f"{{{p}}}" for p in allowed]
            r.error(key, f"unknown placeholder {{{placeholder}}}; use {', '.join(names[:-1])} or {names[-1]}")


def check_url(r: TableReader, key: str, url: str, protocols: tuple[str, ...], template: bool) -> None:
    """A repository URL must be a transport we allow, and carry no password nor a token as its user name."""
    if template:
        check_placeholders(r, key, url, PLACEHOLDERS)
    # Placeholders are filled from grammar-checked segments: check the URL's shape with a stand-in.
    found = urls.parse_or_reason(TEMPLATE_RE.sub("x", url) if template else url)
    if isinstance(found, str):
        r.error(key, f"{url!r} is {found}")
        return
    if found.transport not in protocols:
        r.error(
            key, f"transport {found.transport!r} is not allowed; allowed: {', '.join(protocols)} (see [git] protocols)"
        )
    if found.password is not None:
        r.error(key, "must not contain a password; put it in [[credentials]] so it never leaves the server")
    elif not urls.has_plain_user(found):  # a token written as the user name is a password too
        r.error(key, "must not contain user info but a login name (git@, bot@); put a token in [[credentials]]")
    if found.query or found.fragment:
        r.error(key, "must not contain a query string or fragment")


def check_download(r: TableReader, download: str) -> None:
    """`download` is "git", "archive" or an https:// tarball URL template (for [[modules]] and [[orgs]])."""
    if download not in ("git", "archive"):
        if not download.startswith("https://"):
            r.error("download", f'must be "git", "archive" or an https:// tarball URL template, not {download!r}')
        else:
            check_placeholders(r, "download", download, DOWNLOAD_PLACEHOLDERS)


# long: one rule's keys read and checked in order; split up, the checks across keys would be apart
def parse_rule(r: TableReader, protocols: tuple[str, ...]) -> ModuleRule | None:
    fields: dict[str, str | None] = {}
    for key in PLACEHOLDERS:
        value = r.str(key)
        if value is not None:
            grammar = SYSTEM_RE if key == "system" else NAME_RE
            if not grammar.fullmatch(value):
                expected = (
                    "1-64 lowercase letters and digits"
                    if key == "system"
                    else "1-64 letters, digits, '-' or '_', starting and ending with a letter or digit"
                )
                r.error(key, f"{value!r} is not a valid {key}: expected {expected}")
        fields[key] = value
    repository = r.str("repository", required=True)
    path = (r.str("path", ModuleRule.path) or "").strip("/")
    tag_prefix = r.str("tag_prefix", ModuleRule.tag_prefix) or ""
    clone_url = r.str("clone_url")
    ref = r.str("ref", ModuleRule.ref)
    verified = r.bool("verified", ModuleRule.verified)
    shallow = r.bool("shallow", ModuleRule.shallow)
    # `shallow` exists only in git mode: a rule that set it before archive became the default keeps git.
    download = r.str("download") or ("git" if shallow else ModuleRule.download)
    archive_root = r.str("archive_root")
    require_signed = read_require_signed(r)
    if archive_root is not None and not download.startswith("https://"):
        r.error("archive_root", "applies only to an https:// tarball URL template in `download`")
    if archive_root is not None:
        check_placeholders(r, "archive_root", archive_root, DOWNLOAD_PLACEHOLDERS)
        if any(part in ("", ".", "..") for part in archive_root.strip("/").split("/")):
            r.error("archive_root", f"{archive_root!r} must be a relative directory name, without '.' or '..'")
    check_download(r, download)
    if repository is not None:
        check_url(r, "repository", repository, protocols, template=True)
    if clone_url is not None:
        # What clients clone is not fetched by gitreg, so any transport the CLI understands is fine.
        check_url(r, "clone_url", clone_url, KNOWN_PROTOCOLS, template=True)
    if path and any(part in ("", ".", "..") for part in path.split("/")):
        r.error("path", f"{path!r} must be a relative path inside the repository, without '.' or '..'")
    if path and not re.fullmatch(r"[A-Za-z0-9._/-]+", path):
        r.error("path", f"{path!r} may contain only letters, digits, '.', '_', '-' and '/'")
    if tag_prefix and not re.fullmatch(r"[A-Za-z0-9._/-]+", tag_prefix):
        r.error("tag_prefix", f"{tag_prefix!r} may contain only letters, digits, '.', '_', '-' and '/'")
    checked_ref: Ref = one_of(r, "ref", ref, ("tag", "commit")) or ModuleRule.ref
    if shallow and (download != "git" or checked_ref == "commit"):
        r.error("shallow", 'applies only with download = "git" and ref = "tag" (git clones no commit shallow)')
    r.finish()
    if repository is None:
        return None
    return ModuleRule(
        repository=repository,
        namespace=fields["namespace"],
        name=fields["name"],
        system=fields["system"],
        path=path,
        tag_prefix=tag_prefix,
        clone_url=clone_url,
        ref=checked_ref,
        download=download,
        shallow=shallow,
        verified=verified,
        archive_root=archive_root.strip("/") if archive_root else None,
        require_signed=require_signed,
    )


def parse_modules(root: TableReader, protocols: tuple[str, ...]) -> list[ModuleRule]:
    """`[[modules]]`. Archive mode with registry auth and no `[auth] signing_key` is fine: `gitreg serve`
    keeps a generated key in its storage (storage/signing_key.py)."""
    modules = []
    for i, table in enumerate(root.table_list("modules")):
        rule = parse_rule(TableReader(table, f"modules[{i}]", root.problems, root.env), protocols)
        if rule is not None:
            modules.append(rule)
    return modules
