"""What a deployment hands the container, as the tests build it: a ConfigMap's directory laid
out as Kubernetes mounts it, a decision asked of the running container, and the rate-limit
service an Envoy configuration asks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import yaml


def check(url: str, entries: dict[str, str], domain: str = "example") -> httpx.Response:
    body = {
        "domain": domain,
        "descriptors": [{"entries": [{"key": k, "value": v} for k, v in entries.items()]}],
    }
    return httpx.post(f"{url}/v1/check", json=body, timeout=5)


def configmap_directory(directory: Path, data: dict[str, str], version: str = "2026_01") -> Path:
    """``directory`` laid out as Kubernetes mounts a ConfigMap holding ``data``: the files in
    a hidden version directory, ``..data`` a symlink to it, each file a symlink through
    ``..data``; a new version is swapped in by renaming a new ``..data`` over the old one."""
    directory.mkdir(exist_ok=True)
    files = directory / f"..{version}"
    files.mkdir()
    for name, text in data.items():
        (files / name).write_text(text)
    (directory / "..data_tmp").symlink_to(files.name)
    os.replace(directory / "..data_tmp", directory / "..data")
    for name in data:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    return directory


def rate_limit_service(config: Path) -> dict[str, Any]:
    """The ``rate_limit_service`` of the one rate-limit filter in the Envoy config ``config``."""
    document = yaml.safe_load(config.read_text())
    [found] = [
        http_filter["typed_config"]["rate_limit_service"]
        for listener in document["static_resources"]["listeners"]
        for chain in listener["filter_chains"]
        for network_filter in chain["filters"]
        for http_filter in network_filter["typed_config"].get("http_filters", [])
        if http_filter["name"] == "envoy.filters.http.ratelimit"
    ]
    return dict(found)
