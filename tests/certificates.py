"""Certificates for the TLS tests, made by ``openssl``: a CA, a server's and clients', all
signed by the CA and valid for two days."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def make_certificates(
    directory: Path,
    clients: Mapping[str, str] | None = None,
    *,
    server_san: str = "DNS:localhost",
    ca: str = "ca",
) -> dict[str, Path]:
    """In ``directory``: a CA (``ca.crt``, ``ca.key``; ``ca`` names other ones), a server's
    certificate for ``server_san`` (``server.crt``, ``server.key``; localhost by name, not by
    IP address) and one client certificate for each of ``clients``, a name to its
    subjectAltName (``""`` for none; by default ``client``, without one). Every file made, by
    its name. Skips the test when openssl is not installed."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-keyout", f"{ca}.key", "-out", f"{ca}.crt",
             "-subj", f"/CN=ratekeeper test {ca}")  # fmt: skip
    names = {"server": f"subjectAltName={server_san}"}
    for name, san in (clients if clients is not None else {"client": ""}).items():
        names[name] = f"subjectAltName={san}" if san else ""
    for name, extension in names.items():
        _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN={name}")  # fmt: skip
        (directory / f"{name}.ext").write_text(extension + "\n")
        _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt",
                 "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
                 "-extfile", f"{name}.ext")  # fmt: skip
    return {path.name: path for path in directory.iterdir()}
