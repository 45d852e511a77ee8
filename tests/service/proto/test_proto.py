"""The generated modules of ``ratekeeper.service.proto`` speak Envoy's rate-limit protocol.

Three checks bind them to the protocol: the generated modules are exactly what the pinned
generators write from the ``.proto`` files; every message has Envoy's field names, numbers and
types (the reference list below, checked against Envoy 1.40); and a request and a response
serialize to bytes built here by hand from the wire format. A gRPC round trip on loopback is in
tests/service/proto/test_proto_grpc.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from google.protobuf import descriptor, duration_pb2, struct_pb2, timestamp_pb2, wrappers_pb2

from ratekeeper.service.proto import base_pb2, ratelimit_pb2, ratelimit_unit_pb2, rls_pb2

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "src" / "ratekeeper" / "service" / "proto"

RLS = "envoy.service.ratelimit.v3"
COMMON = "envoy.extensions.common.ratelimit.v3"
CORE = "envoy.config.core.v3"
TYPE = "envoy.type.v3"

#: Every message of the protocol: its fields as (number, name, type), a message or enum type by
#: its full name, "repeated " before a repeated field.
MESSAGES: dict[str, list[tuple[int, str, str]]] = {
    f"{RLS}.RateLimitRequest": [
        (1, "domain", "string"),
        (2, "descriptors", f"repeated {COMMON}.RateLimitDescriptor"),
        (3, "hits_addend", "uint32"),
    ],
    f"{RLS}.RateLimitResponse": [
        (1, "overall_code", f"{RLS}.RateLimitResponse.Code"),
        (2, "statuses", f"repeated {RLS}.RateLimitResponse.DescriptorStatus"),
        (3, "response_headers_to_add", f"repeated {CORE}.HeaderValue"),
        (4, "request_headers_to_add", f"repeated {CORE}.HeaderValue"),
        (5, "raw_body", "bytes"),
        (6, "dynamic_metadata", "google.protobuf.Struct"),
        (7, "quota", f"{RLS}.RateLimitResponse.Quota"),
    ],
    f"{RLS}.RateLimitResponse.RateLimit": [
        (1, "requests_per_unit", "uint32"),
        (2, "unit", f"{RLS}.RateLimitResponse.RateLimit.Unit"),
        (3, "name", "string"),
    ],
    f"{RLS}.RateLimitResponse.DescriptorStatus": [
        (1, "code", f"{RLS}.RateLimitResponse.Code"),
        (2, "current_limit", f"{RLS}.RateLimitResponse.RateLimit"),
        (3, "limit_remaining", "uint32"),
        (4, "duration_until_reset", "google.protobuf.Duration"),
        (5, "quota", f"{RLS}.RateLimitResponse.Quota"),
    ],
    f"{RLS}.RateLimitResponse.Quota": [
        (1, "requests", "uint32"),
        (2, "valid_until", "google.protobuf.Timestamp"),
        (3, "id", "string"),
    ],
    f"{COMMON}.RateLimitDescriptor": [
        (1, "entries", f"repeated {COMMON}.RateLimitDescriptor.Entry"),
        (2, "limit", f"{COMMON}.RateLimitDescriptor.RateLimitOverride"),
        (3, "hits_addend", "google.protobuf.UInt64Value"),
    ],
    f"{COMMON}.RateLimitDescriptor.Entry": [
        (1, "key", "string"),
        (2, "value", "string"),
    ],
    f"{COMMON}.RateLimitDescriptor.RateLimitOverride": [
        (1, "requests_per_unit", "uint32"),
        (2, "unit", f"{TYPE}.RateLimitUnit"),
    ],
    f"{CORE}.HeaderValue": [
        (1, "key", "string"),
        (2, "value", "string"),
        (3, "raw_value", "bytes"),
    ],
}

#: Every enum of the protocol: its values by name.
ENUMS: dict[str, dict[str, int]] = {
    f"{RLS}.RateLimitResponse.Code": {"UNKNOWN": 0, "OK": 1, "OVER_LIMIT": 2},
    f"{RLS}.RateLimitResponse.RateLimit.Unit": {
        "UNKNOWN": 0,
        "SECOND": 1,
        "MINUTE": 2,
        "HOUR": 3,
        "DAY": 4,
        "MONTH": 5,
        "YEAR": 6,
        "WEEK": 7,
    },
    f"{TYPE}.RateLimitUnit": {
        "UNKNOWN": 0,
        "SECOND": 1,
        "MINUTE": 2,
        "HOUR": 3,
        "DAY": 4,
        "MONTH": 5,
        "YEAR": 6,
    },
}

#: Oneofs, by message: their name and fields.
ONEOFS = {f"{RLS}.RateLimitResponse.Quota": {"expiration_specifier": ["valid_until"]}}

SCALARS = {
    descriptor.FieldDescriptor.TYPE_STRING: "string",
    descriptor.FieldDescriptor.TYPE_BYTES: "bytes",
    descriptor.FieldDescriptor.TYPE_UINT32: "uint32",
}

FILES = [
    rls_pb2.DESCRIPTOR,
    ratelimit_pb2.DESCRIPTOR,
    ratelimit_unit_pb2.DESCRIPTOR,
    base_pb2.DESCRIPTOR,
]


def declared() -> tuple[dict[str, descriptor.Descriptor], dict[str, descriptor.EnumDescriptor]]:
    """Every message and every enum the generated modules declare, nested ones included."""
    messages: dict[str, descriptor.Descriptor] = {}
    enums: dict[str, descriptor.EnumDescriptor] = {}

    def visit(message: descriptor.Descriptor) -> None:
        messages[message.full_name] = message
        enums.update((enum.full_name, enum) for enum in message.enum_types)
        for nested in message.nested_types:
            visit(nested)

    for file in FILES:
        enums.update((enum.full_name, enum) for enum in file.enum_types_by_name.values())
        for message in file.message_types_by_name.values():
            visit(message)
    return messages, enums


def type_of(field: descriptor.FieldDescriptor) -> str:
    """``field``'s type as the reference list writes it."""
    if field.message_type is not None:
        name = field.message_type.full_name
    elif field.enum_type is not None:
        name = field.enum_type.full_name
    else:
        name = SCALARS[field.type]
    return f"repeated {name}" if field.is_repeated else name


def test_every_message_has_envoys_field_names_numbers_and_types() -> None:
    messages, _ = declared()
    assert sorted(messages) == sorted(MESSAGES)
    for name, fields in MESSAGES.items():
        found = sorted(messages[name].fields, key=lambda field: field.number)
        assert [(field.number, field.name, type_of(field)) for field in found] == fields, name


def test_every_enum_has_envoys_values() -> None:
    _, enums = declared()
    assert sorted(enums) == sorted(ENUMS)
    for name, values in ENUMS.items():
        assert {value.name: value.number for value in enums[name].values} == values, name


def test_the_only_oneof_is_the_quotas_expiration() -> None:
    messages, _ = declared()
    found = {
        name: {oneof.name: [field.name for field in oneof.fields] for oneof in message.oneofs}
        for name, message in messages.items()
        if message.oneofs
    }
    assert found == ONEOFS


def test_the_service_and_its_method_path_are_envoys() -> None:
    service = rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"]
    assert [
        (
            f"/{service.full_name}/{method.name}",
            method.input_type.full_name,
            method.output_type.full_name,
            method.client_streaming,
            method.server_streaming,
        )
        for method in service.methods
    ] == [
        (
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            f"{RLS}.RateLimitRequest",
            f"{RLS}.RateLimitResponse",
            False,
            False,
        )
    ]


# The wire format, by hand: a field is its key (field number << 3 | wire type) as a varint,
# then a varint value (wire type 0) or a varint length and that many bytes (wire type 2).
# An absent field, or a proto3 scalar at its default (0, "", b""), is not written at all.
VARINT, LEN = 0, 2


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint: seven bits a byte, least significant first."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uint(number: int, value: int) -> bytes:
    """Field ``number`` holding a varint (uint32, uint64, int64 or enum)."""
    return varint(number << 3 | VARINT) + varint(value)


def delimited(number: int, payload: bytes | str) -> bytes:
    """Field ``number`` holding a string, bytes or an embedded message."""
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | LEN) + varint(len(data)) + data


def test_the_hand_encoder_matches_the_wire_format_documentations_examples() -> None:
    assert varint(1) == b"\x01"
    assert varint(150) == b"\x96\x01"
    assert uint(1, 150) == bytes.fromhex("089601")
    assert delimited(2, "testing") == bytes.fromhex("120774657374696e67")
    assert delimited(3, uint(1, 150)) == bytes.fromhex("1a03089601")


def entry(key: str, value: str) -> bytes:
    """RateLimitDescriptor.entries (1) holding Entry{key (1), value (2)}."""
    return delimited(1, delimited(1, key) + delimited(2, value))


def test_a_request_has_envoys_bytes() -> None:
    descriptor_type = ratelimit_pb2.RateLimitDescriptor
    request = rls_pb2.RateLimitRequest(
        domain="test",
        descriptors=[
            descriptor_type(entries=[descriptor_type.Entry(key="generic_key", value="default")]),
            descriptor_type(
                entries=[
                    descriptor_type.Entry(key="generic_key", value="default"),
                    descriptor_type.Entry(key="user", value="alice"),
                ],
                limit=descriptor_type.RateLimitOverride(
                    requests_per_unit=5, unit=ratelimit_unit_pb2.MINUTE
                ),
                hits_addend=wrappers_pb2.UInt64Value(value=3),
            ),
        ],
    )
    by_hand = (
        delimited(1, "test")  # domain
        + delimited(2, entry("generic_key", "default"))  # descriptors[0]
        + delimited(  # descriptors[1]
            2,
            entry("generic_key", "default")
            + entry("user", "alice")
            + delimited(2, uint(1, 5) + uint(2, 2))  # limit: 5 per MINUTE (2)
            + delimited(3, uint(1, 3)),  # hits_addend: UInt64Value{value (1): 3}
        )
    )  # hits_addend (3) is 0, so absent
    assert request.SerializeToString() == by_hand
    assert rls_pb2.RateLimitRequest.FromString(by_hand) == request


def test_a_response_has_envoys_bytes() -> None:
    response_type = rls_pb2.RateLimitResponse
    status, limit, quota = (
        response_type.DescriptorStatus,
        response_type.RateLimit,
        response_type.Quota,
    )
    response = response_type(
        overall_code=response_type.OVER_LIMIT,
        statuses=[
            status(
                code=response_type.OK,
                current_limit=limit(requests_per_unit=100, unit=limit.MINUTE),
                limit_remaining=99,
                duration_until_reset=duration_pb2.Duration(seconds=30),
                quota=quota(requests=50, id="shared"),
            ),
            status(
                code=response_type.OVER_LIMIT,
                current_limit=limit(requests_per_unit=5, unit=limit.MINUTE, name="per-user"),
                limit_remaining=0,
                duration_until_reset=duration_pb2.Duration(seconds=30),
            ),
        ],
        response_headers_to_add=[base_pb2.HeaderValue(key="x-ratelimit-limit", value="5")],
        request_headers_to_add=[base_pb2.HeaderValue(key="x-tier", raw_value=b"\xff")],
        raw_body=b"over limit",
        dynamic_metadata=struct_pb2.Struct(
            fields={"reason": struct_pb2.Value(string_value="per-user")}
        ),
        quota=quota(
            requests=10, valid_until=timestamp_pb2.Timestamp(seconds=1_700_000_000), id="q"
        ),
    )
    by_hand = (
        uint(1, 2)  # overall_code: OVER_LIMIT
        + delimited(  # statuses[0]
            2,
            uint(1, 1)  # code: OK
            + delimited(2, uint(1, 100) + uint(2, 2))  # current_limit: 100 per MINUTE
            + uint(3, 99)  # limit_remaining
            + delimited(4, uint(1, 30))  # duration_until_reset: Duration{seconds (1): 30}
            + delimited(5, uint(1, 50) + delimited(3, "shared")),  # quota: requests, id
        )
        + delimited(  # statuses[1]; limit_remaining 0 is absent
            2,
            uint(1, 2)  # code: OVER_LIMIT
            + delimited(2, uint(1, 5) + uint(2, 2) + delimited(3, "per-user"))
            + delimited(4, uint(1, 30)),
        )
        + delimited(3, delimited(1, "x-ratelimit-limit") + delimited(2, "5"))  # HeaderValue
        + delimited(4, delimited(1, "x-tier") + delimited(3, b"\xff"))  # key, raw_value
        + delimited(5, b"over limit")  # raw_body
        # dynamic_metadata: Struct{fields (1): map entry{key (1), value (2): Value{string (3)}}}
        + delimited(
            6, delimited(1, delimited(1, "reason") + delimited(2, delimited(3, "per-user")))
        )
        # quota: requests (1), valid_until (2): Timestamp{seconds (1)}, id (3)
        + delimited(7, uint(1, 10) + delimited(2, uint(1, 1_700_000_000)) + delimited(3, "q"))
    )
    assert response.SerializeToString() == by_hand
    assert response_type.FromString(by_hand) == response


def python(*lines: str) -> subprocess.CompletedProcess[str]:
    """Run ``lines`` as a program in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", "\n".join(lines)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_ratekeeper_imports_neither_grpc_nor_protobuf() -> None:
    completed = python(
        "import sys",
        "import ratekeeper, ratekeeper.service",
        "roots = ('grpc', 'grpc_health', 'grpc_tools', 'google.protobuf')",
        "print(sorted(m for m in sys.modules if m in roots or m.startswith(roots)))",
    )
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "[]\n", "")


@pytest.mark.parametrize(
    ("module", "package"), [("google.protobuf", "protobuf"), ("grpc", "grpcio")]
)
def test_without_the_server_extra_the_generated_modules_name_the_pip_command(
    module: str, package: str
) -> None:
    completed = python(
        "import sys",
        f"sys.modules[{module!r}] = None",
        "from ratekeeper.core.errors import MissingExtraError",
        "try:",
        "    from ratekeeper.service.proto import rls_pb2",
        "except MissingExtraError as error:",
        "    print(error)",
    )
    assert (completed.returncode, completed.stderr) == (0, "")
    assert completed.stdout == (
        f"{package} is not installed; install it with: pip install 'ratekeeper[server]'\n"
    )


def test_the_generated_modules_are_exactly_what_the_generators_write(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_proto.py"), "--out", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    fresh = tmp_path / "ratekeeper" / "service" / "proto"
    names = sorted(path.name for path in fresh.iterdir())
    assert names == sorted(path.name for path in PROTO.glob("*_pb2*"))
    stale = [name for name in names if (fresh / name).read_bytes() != (PROTO / name).read_bytes()]
    assert stale == [], "regenerate them: .venv/bin/python scripts/generate_proto.py"


def read(name: str) -> str:
    """The text of the generated module ``name``."""
    return (PROTO / name).read_text()


def test_the_server_extra_admits_no_runtime_older_than_the_generated_code() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    protobuf = re.search(r"^# Protobuf Python Version: (\d+)\.(\S+)$", read("rls_pb2.py"), re.M)
    grpc = re.search(r"^GRPC_GENERATED_VERSION = '(\S+)'$", read("rls_pb2_grpc.py"), re.M)
    assert protobuf is not None
    assert grpc is not None
    major = int(protobuf[1])
    pins = [f"protobuf>={major}.{protobuf[2]},<{major + 1}", f"grpcio>={grpc[1]},<2"]
    for extra in ("server", "dev"):
        assert set(pins) <= set(extras[extra]), extra
