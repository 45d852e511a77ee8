"""The image as shipped (``Containerfile``): linted, then built and run with podman.

What it is (size, user, how soon it is ready, no compiler), that it serves decisions on a
read-only root filesystem writing only to its volume and /tmp, and that a ConfigMap-style
rules directory (``..data`` swapped to a new version, as Kubernetes updates one) takes effect.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.container.deployed import check, configmap_directory
from tests.container.images import CONTAINERFILE, Container, podman, size
from tests.processes import free_port, wait_until

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "rules" / "envoy" / "examples"
#: What podman itself puts into every container's root (its /etc/hosts, /etc/resolv.conf and
#: /etc/hostname are mounted on files it creates), read-only or not.
PODMANS_OWN = {"C /etc", "A /etc/hosts", "A /etc/resolv.conf", "A /etc/hostname"}
#: ``--read-only`` as docker means it (podman adds writable /tmp, /run, /var/tmp unless told
#: not to): only the image's volume and a /tmp of our own are writable.
READ_ONLY = ("--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp")
LOGIN = {"path": "/login", "user": "alice"}


def test_the_containerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    found = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    assert found is not None, "hadolint is not installed; pip install -e '.[dev]' installs it"
    done = subprocess.run(
        [found, str(CONTAINERFILE)], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def containers() -> Iterator[list[Container]]:
    """The containers a test starts: removed, with their volumes, when it ends."""
    started: list[Container] = []
    yield started
    for container in started:
        container.remove()


def published(image: str, *options: str, args: tuple[str, ...] = ()) -> Container:
    port = free_port()
    return Container(
        image, ["-p", f"127.0.0.1:{port}:8080", *options], args, url=f"http://127.0.0.1:{port}"
    )


@pytest.mark.slow
def test_the_image_its_size_user_and_start(image: str, containers: list[Container]) -> None:
    megabytes = size(image) / 1e6
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image).strip()
    containers.append(container := published(image))
    seconds = container.ready()
    uid, gid = container.exec("id", "-u").strip(), container.exec("id", "-g").strip()
    print(f"\nimage {image}: {megabytes:.0f} MB; user {user}; ready {seconds:.2f} s after run")
    assert user == "10001:10001" and (uid, gid) == ("10001", "10001")
    # Its entrypoint, ratekeeper serve, is PID 1: podman stop's SIGTERM reaches it.
    assert container.exec("cat", "/proc/1/cmdline").split("\0")[1:3] == [
        "/opt/ratekeeper/bin/ratekeeper",
        "serve",
    ]
    compilers = container.exec("sh", "-c", "command -v gcc cc make || true").strip()
    assert compilers == ""
    assert megabytes < 400  # the base (225 MB here) and ratekeeper[server,redis] (~80 MB)
    assert seconds < 20
    assert container.stop() == 0


@pytest.mark.slow
def test_a_read_only_root_filesystem_writes_only_to_the_volume(
    image: str, containers: list[Container]
) -> None:
    containers.append(container := published(image, *READ_ONLY))
    container.ready()
    answers = [check(container.url, LOGIN).status_code for _ in range(6)]
    assert answers == [200] * 5 + [429]  # 5 logins a minute per user
    changed = set(podman("diff", container.name).split("\n")) - {""}
    assert changed <= PODMANS_OWN, changed - PODMANS_OWN
    # The configuration store's default file went to the volume, the working directory.
    assert "ratekeeper.db" in container.exec("ls", "/var/lib/ratekeeper").split()
    assert container.stop() == 0
    assert "Traceback" not in container.logs()


def configmap(directory: Path, version: str, limit: int) -> None:
    """The reference's ``example.yaml`` as a ConfigMap, its unspec rule's limit at ``limit``."""
    text = (EXAMPLES / "example.yaml").read_text()
    unspec = "  - key: unspec\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n"
    old = unspec + "      requests_per_unit: 2\n"
    assert old in text
    edited = text.replace(old, unspec + f"      requests_per_unit: {limit}\n")
    configmap_directory(directory, {"example.yaml": edited}, version)


def unspec_limit(url: str, probe: int) -> int:
    body = {"domain": "rl", "descriptors": [{"entries": [{"key": "unspec", "value": f"p{probe}"}]}]}
    answer = httpx.post(f"{url}/json", json=body, timeout=5).json()
    return int(answer["statuses"][0]["currentLimit"]["requestsPerUnit"])


@pytest.mark.slow
def test_a_configmap_swapped_behind_its_symlink_takes_effect(
    image: str, containers: list[Container], tmp_path: Path
) -> None:
    config = tmp_path / "config"
    configmap(config, "2026_01", 2)
    reference = {
        "RUNTIME_ROOT": "/data",
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "RUNTIME_IGNOREDOTFILES": "true",
        "USE_STATSD": "false",
        "RATEKEEPER_STORE": "memory://",  # no Redis here: the reference's store is its socket
    }
    variables = [f"--env={name}={value}" for name, value in reference.items()]
    mount = f"--volume={config}:/data/ratelimit/config:ro"
    containers.append(container := published(image, *READ_ONLY, mount, *variables))
    container.ready()
    probes = iter(range(1000))
    assert unspec_limit(container.url, next(probes)) == 2
    configmap(config, "2026_02", 7)
    wait_until(lambda: unspec_limit(container.url, next(probes)) == 7, 5, "the new limit")
    assert container.stop() == 0
    log = container.logs()
    assert "reading envoyproxy/ratelimit's variables and runtime directory" in log
    assert "rules reloaded from " in log
