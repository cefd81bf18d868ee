"""deploy/kubernetes: valid against the Kubernetes JSON schemas (offline), and a sound deployment of gitreg."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gitreg.config.parse import parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
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


def test_the_configmap_holds_a_valid_redis_config_whose_secrets_come_from_the_secret():
    [configmap] = of_kind("ConfigMap")
    [secret] = of_kind("Secret")
    [deployment] = of_kind("Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"secretRef": {"name": secret["metadata"]["name"]}} in container["envFrom"]
    text = configmap["data"]["config.toml"]
    config = parse_config(tomllib.loads(text), env=secret["stringData"])  # every ${VAR} is in the Secret
    assert config.cache.backend == "redis"
    assert config.storage.path == "/var/lib/gitreg"
    assert config.server.host == "0.0.0.0"
    for value in secret["stringData"].values():
        assert value not in text  # the ConfigMap names variables, never the secrets themselves
