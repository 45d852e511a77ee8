"""The Kubernetes manifests (``deploy/kubernetes``): valid against Kubernetes' schemas, and
the container the Deployment describes run with podman as a kubelet would run it.

No cluster runs here, so the manifests are not applied: the test reads the Deployment and
gives podman its environment, user, read-only root, volumes (the ConfigMap's files laid out as
Kubernetes mounts them, an empty directory for each ``emptyDir``) and probes. Only the
addresses are the test's: Redis (``REDIS_URL``) is a redis-server of its own, and the ports
are free ones (the reference's ``PORT`` and ``GRPC_PORT``) on the host's network.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from tests.container.deployed import check, configmap_directory
from tests.container.images import Container
from tests.processes import free_ports
from tests.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
VERSION = "1.30.0"


def documents() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    found: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        found.extend(yaml.safe_load_all((MANIFESTS / name).read_text()))
    return found


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    kinds = sorted(document["kind"] for document in documents())
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Service",
    ]


@pytest.mark.parametrize("document", documents(), ids=lambda d: d["kind"])
def test_each_manifest_is_valid_against_kubernetes_schemas(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, VERSION, strict=True)


def test_the_validator_refuses_an_unknown_field() -> None:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def test_the_deployment_runs_non_root_read_only_without_instances() -> None:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "cpu" in container["resources"]["requests"]
    # The fleet counts itself through Redis: nothing to keep equal to the replicas.
    assert "args" not in container and "command" not in container
    assert all("INSTANCES" not in variable["name"] for variable in container["env"])


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.mark.slow
def test_the_deployments_container_under_podman(
    image: str, tmp_path: Path, redis: RedisServer
) -> None:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    config_map = next(d for d in documents() if d["kind"] == "ConfigMap")
    pod = deployment["spec"]["template"]["spec"]
    (spec,) = pod["containers"]
    http, grpc = free_ports(2)
    environ = {variable["name"]: variable["value"] for variable in spec["env"]}
    assert environ["REDIS_URL"] == "redis:6379"
    environ.update(REDIS_URL=f"127.0.0.1:{redis.port}", PORT=str(http), GRPC_PORT=str(grpc))
    user = pod["securityContext"]
    options = [
        "--network=host",
        f"--user={user['runAsUser']}:{user['runAsGroup']}",
        *(f"--env={name}={value}" for name, value in environ.items()),
    ]
    if spec["securityContext"]["readOnlyRootFilesystem"]:
        options += ["--read-only", "--read-only-tmpfs=false"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for mount in spec["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            assert volume["configMap"]["name"] == config_map["metadata"]["name"]
            directory = configmap_directory(tmp_path / mount["name"], config_map["data"])
            options.append(f"--volume={directory}:{mount['mountPath']}:ro")
        else:
            assert "emptyDir" in volume
            # an emptyDir, writable by the pod's user (its fsGroup)
            options.append(f"--tmpfs={mount['mountPath']}:rw,mode=1777")
    container = Container(image, options, spec.get("args", []), url=f"http://127.0.0.1:{http}")
    try:
        container.ready()
        for probe in ("livenessProbe", "readinessProbe"):
            path = spec[probe]["httpGet"]["path"]
            assert httpx.get(f"{container.url}{path}", timeout=5).status_code == 200
        user_entries = {"generic_key": "default", "user": "alice"}
        # 10 a second per user: the first refusal comes after 10 (or, if a second ended
        # meanwhile, up to 20) requests let through.
        answers = [check(container.url, user_entries, "edge").status_code for _ in range(21)]
        assert 429 in answers and 10 <= answers.index(429) <= 20, answers
        assert container.stop() == 0
        log = container.logs()
    finally:
        container.remove()
    assert f"request store: redis://127.0.0.1:{redis.port}" in log
    assert "Traceback" not in log


def test_the_manifests_pass_the_command_line_validator() -> None:
    files = [str(MANIFESTS / name) for name in sorted(p.name for p in MANIFESTS.glob("*.yaml"))]
    files.remove(str(MANIFESTS / "kustomization.yaml"))
    command = [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", VERSION, *files]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
