"""The surfaces a decision arrives by, named once: the metrics time the decisions of each, the
dashboard shows their latency, and the bound on decisions in flight counts what it sheds of
each."""

#: Every surface, in the order the figures list them: ratekeeper's HTTP API (Envoy's
#: ``POST /json`` among its routes), Envoy's gRPC ``ShouldRateLimit``, nginx's
#: ``auth_request`` (``GET /v1/nginx``), and the library, deciding in its own process.
SURFACES = ("http", "grpc", "nginx", "library")
#: The surfaces the decision service serves: every one but the library.
SERVED = tuple(surface for surface in SURFACES if surface != "library")
