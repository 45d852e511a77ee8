"""Envoy's rate-limit protocol (v3) as Python modules generated from the ``.proto`` files here.

The service imports them as ``from ratekeeper.service.proto import rls_pb2, rls_pb2_grpc``:
``rls_pb2`` holds ``RateLimitRequest`` and ``RateLimitResponse``, ``rls_pb2_grpc`` the
``RateLimitService`` servicer, stub and ``add_RateLimitServiceServicer_to_server``;
``ratelimit_pb2`` (``RateLimitDescriptor``), ``ratelimit_unit_pb2`` (``RateLimitUnit``) and
``base_pb2`` (``HeaderValue``) hold the messages they use. Packages, message names, field numbers
and types are Envoy's, so the bytes on the wire are the same and the method path is
``/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit``.

The ``*_pb2*`` modules and their stubs are generated, never edited: change a ``.proto`` file,
then run ``python scripts/generate_proto.py``. A test regenerates them and demands the same bytes.

They need the ``server`` extra (grpcio and protobuf); importing any of them without it raises
``MissingExtraError``.
"""

from ratekeeper.core.errors import MissingExtraError

try:
    import google.protobuf  # noqa: F401  (imported only to check that the extra is installed)
except ImportError as error:
    raise MissingExtraError("protobuf", "server") from error
try:
    import grpc  # noqa: F401
except ImportError as error:
    raise MissingExtraError("grpcio", "server") from error
