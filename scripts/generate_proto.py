"""Regenerate the modules of ``ratekeeper.service.proto`` from the ``.proto`` files beside them.

    python scripts/generate_proto.py            # rewrite them in src/
    python scripts/generate_proto.py --out DIR  # write them under DIR instead

Run it with the project's virtual environment (``.venv/bin/python``): it needs the dev extra,
whose exact pins of grpcio-tools (protoc and the gRPC plugin) and mypy-protobuf (the typed
stubs) make the output the same everywhere; tests/service/proto/test_proto.py checks that it is.

The proto root is ``src/``, so each ``.proto`` file is named ``ratekeeper/service/proto/...`` and
the generated modules import one another as ``ratekeeper.service.proto.*`` with no rewriting.
For each file protoc writes ``*_pb2.py`` and mypy-protobuf its stub ``*_pb2.pyi``; for the one
file that declares a service, ``rls.proto``, the gRPC plugin adds ``rls_pb2_grpc.py`` and
mypy-protobuf ``rls_pb2_grpc.pyi``.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src"
PACKAGE = Path("ratekeeper", "service", "proto")
#: The files that declare a service; only these get ``*_pb2_grpc`` modules.
SERVICES = ["rls.proto"]


def plugin(name: str) -> str:
    """The path of the protoc plugin ``name`` installed beside this Python."""
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        raise SystemExit(f"{path} is missing: install the dev extra (pip install -e '.[dev]')")
    return str(path)


def run(*arguments: str) -> None:
    """Run protoc with the well-known types and ``src/`` as the include paths."""
    well_known = resources.files("grpc_tools") / "_proto"
    argv = ["protoc", f"-I{SOURCE}", f"-I{well_known}", *arguments]
    if protoc.main(argv) != 0:
        raise SystemExit(f"protoc failed: {' '.join(argv)}")


def generate(out: Path) -> None:
    """Write every generated module of the package under ``out`` (``out/ratekeeper/...``)."""
    out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(PACKAGE / path.name) for path in (SOURCE / PACKAGE).glob("*.proto"))
    run(
        f"--python_out={out}",
        f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}",
        f"--mypy_out={out}",
        *protos,
    )
    run(
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy_grpc={plugin('protoc-gen-mypy_grpc')}",
        f"--mypy_grpc_out={out}",
        *(str(PACKAGE / name) for name in SERVICES),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SOURCE, help="output root (default: src)")
    generate(parser.parse_args().out.resolve())


if __name__ == "__main__":
    main()
