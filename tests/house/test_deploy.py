"""deploy/kubernetes: valid against the Kubernetes JSON schemas (offline), and a sound deployment of gitreg."""

from __future__ import annotations

import secrets
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gitreg.config.parse import parse_config
from gitreg.core.errors import ConfigError
from tests.support import docs
from tests.support.process import run_gitreg

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.33.0"  # a supported release; the package ships its schemas


def documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents() if doc["kind"] == kind]


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_against_the_kubernetes_schema(doc):
    # strict: an unknown (misspelt) field is an error, as `kubectl apply --validate=strict` says.
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_deployment_runs_three_non_root_replicas_with_probes_and_a_read_only_root():
    [deployment] = of_kind("Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    assert spec["replicas"] == 3
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    assert {mounts["/var/lib/gitreg"], mounts["/tmp"]} <= empty_dirs  # writable places on a read-only root
    [pdb] = of_kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"] == spec["selector"]
    [service] = of_kind("Service")
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]


def real_values(secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's values as an operator replaces them: random, long enough, no placeholder."""
    return {name: secrets.token_hex(24) for name in secret["stringData"]}


def test_the_configmap_holds_a_valid_redis_config_whose_secrets_come_from_the_secret():
    [configmap] = of_kind("ConfigMap")
    [secret] = of_kind("Secret")
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in container["envFrom"]
    text = configmap["data"]["config.toml"]
    config = parse_config(tomllib.loads(text), env=real_values(secret))  # every ${VAR} is in the Secret
    assert config.cache.backend == "redis"
    assert config.storage.path == "/var/lib/gitreg"
    assert config.server.host == "0.0.0.0"
    for value in secret["stringData"].values():
        assert value not in text  # the ConfigMap names variables, never the secrets themselves


def test_gitreg_refuses_to_start_with_the_secrets_placeholders_naming_each_key():
    [configmap] = of_kind("ConfigMap")
    [secret] = of_kind("Secret")
    with pytest.raises(ConfigError) as refused:
        parse_config(tomllib.loads(configmap["data"]["config.toml"]), env=secret["stringData"])
    placeholder = "holds a placeholder (CHANGE-ME...): set the real value"
    assert refused.value.problems == [
        f"cache.redis_url: environment variable GITREG_REDIS_PASSWORD {placeholder}",
        f"webhooks.github_secret: environment variable GITHUB_WEBHOOK_SECRET {placeholder}",
        f"credentials[0].password: environment variable GITHUB_TOKEN {placeholder}",
    ]
    for value in secret["stringData"].values():
        assert value not in str(refused.value)  # named, never shown


@pytest.mark.slow
@pytest.mark.parametrize("command", ["check", "serve"])
def test_check_and_serve_refuse_the_shipped_secret_exiting_2_with_the_key(command, tmp_path):
    [configmap] = of_kind("ConfigMap")
    [secret] = of_kind("Secret")
    config = tmp_path / "config.toml"
    config.write_text(configmap["data"]["config.toml"])
    result = run_gitreg(command, "--config", str(config), env=secret["stringData"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "webhooks.github_secret: environment variable GITHUB_WEBHOOK_SECRET holds a placeholder" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_configmap_serves_the_readme_repository_naming():
    [configmap] = of_kind("ConfigMap")
    config = parse_config(tomllib.loads(configmap["data"]["config.toml"]), env=real_values(of_kind("Secret")[0]))
    [rule] = config.modules
    assert rule.repository == "https://github.com/acme/terraform-{system}-{name}.git"
    assert "terraform-{system}-{name}" in docs.text()


def _quantity(value: str) -> int:
    """Bytes of a Kubernetes quantity such as `5Gi`."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(value[:-2]) * units[value[-2:]] if value[-2:] in units else int(value)


def test_storage_max_bytes_leaves_room_in_the_volume_for_what_it_does_not_count():
    [configmap] = of_kind("ConfigMap")
    [deployment] = of_kind("Deployment")
    config = parse_config(tomllib.loads(configmap["data"]["config.toml"]), env=real_values(of_kind("Secret")[0]))
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    volume = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}[config.storage.path]
    [size_limit] = [v["emptyDir"]["sizeLimit"] for v in pod["volumes"] if v["name"] == volume]
    # index.json, details/ and the records, and an archive built or sent while over the bound.
    assert config.storage.max_bytes <= _quantity(size_limit) * 0.85


def test_a_stopping_pod_waits_for_the_endpoints_to_go_then_has_time_to_finish():
    [deployment] = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and int(command[1]) >= 5
    shutdown_timeout = 10  # cli.main's runner: in-flight requests get this long after SIGTERM
    assert pod["terminationGracePeriodSeconds"] >= int(command[1]) + shutdown_timeout + 10


def test_every_object_lives_in_the_namespace_the_first_file_creates():
    [namespace] = of_kind("Namespace")
    first = sorted(DEPLOY.glob("*.yaml"))[0]
    assert [doc["kind"] for doc in yaml.safe_load_all(first.read_text()) if doc] == ["Namespace"]
    for doc in documents():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace["metadata"]["name"], doc["kind"]


def test_the_ingress_and_network_policy_reach_the_pods_at_the_public_url():
    [ingress] = of_kind("Ingress")
    [policy] = of_kind("NetworkPolicy")
    [service] = of_kind("Service")
    [deployment] = of_kind("Deployment")
    [configmap] = of_kind("ConfigMap")
    config = parse_config(tomllib.loads(configmap["data"]["config.toml"]), env=real_values(of_kind("Secret")[0]))
    [rule] = ingress["spec"]["rules"]
    assert f"https://{rule['host']}" == config.server.public_url
    assert rule["host"] in ingress["spec"]["tls"][0]["hosts"]
    [path] = rule["http"]["paths"]
    assert path["path"] == "/" and path["pathType"] == "Prefix"
    assert path["backend"]["service"]["name"] == service["metadata"]["name"]
    assert path["backend"]["service"]["port"]["name"] in [p["name"] for p in service["spec"]["ports"]]
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [port] = pod["spec"]["containers"][0]["ports"]
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [port["containerPort"]]
    allowed_out = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert {53, 6379, 443} <= allowed_out  # DNS, Redis, the Git hosts
