"""The decision service: ratekeeper's engine on the wire (Envoy's gRPC rate-limit protocol, HTTP
JSON, nginx ``auth_request``). Every wire parses its request into one ``Call``, has it decided
by the one engine, and formats the ``Answer`` (``ratekeeper.wire.translate``): the doors only
translate.

Its rooms: ``runtime`` (the settings, and the app built from them, wired and served), the
``dashboard``, the doors ``http`` and ``grpc``, ``observe`` (metrics and logs), ``compat``
(envoyproxy/ratelimit's settings), ``inflight`` (the bound on decisions in flight), and below
them all ``proto`` (Envoy's protocol, generated), ``surfaces`` and ``asgi``.
"""
