"""Every environment variable of Envoy's reference rate-limit service, and what ratekeeper does
with it.

``VARIABLES`` lists the 114 variables ``src/settings/settings.go`` of envoyproxy/ratelimit
reads, in its order, each with the reference's default and one of three fates:

- ``HONOURED``: read, and turned into the ratekeeper setting ``Variable.setting`` names
  (``compat.translate`` does it);
- ``CHECKED``: ratekeeper behaves as the reference does at the values ``Variable.accepts``
  names; any other value stops the start, with a message naming the variable and saying why
  (``Variable.note``);
- ``IGNORED``: harmless to ignore, ``Variable.note`` says why; set, it is logged in one line
  (a warning when something outside ratekeeper, such as a scrape or a dashboard, must change).

``docs/migrating.md`` holds the same table for people.
"""

from __future__ import annotations

from typing import NamedTuple

HONOURED, CHECKED, IGNORED = "honoured", "checked", "ignored"


class Variable(NamedTuple):
    """One variable of the reference: its default (as text; ``""`` for none), its fate, the
    ratekeeper setting it feeds (honoured ones), why (checked and ignored ones), the values
    ratekeeper accepts (checked ones), and whether ignoring it deserves a warning rather than
    an info line."""

    default: str
    fate: str
    setting: str = ""
    note: str = ""
    warn: bool = False
    accepts: str = ""


_XDS = "only read with CONFIG_TYPE=GRPC_XDS_SOTW, which is not supported"
_MEMCACHE = "only read with BACKEND_TYPE=memcache, which is not supported"
_PER_SECOND = "only read with REDIS_PERSECOND=true (see there)"
_SAME = "any, with REDIS_PERSECOND=true: the same as the REDIS_ one"
_PIPELINE = (
    "ratekeeper's asyncio Redis store sends the calls of each event-loop tick in one pipeline "
    "of its own"
)
_POOL = "redis-py opens connections as calls need them; the batching keeps them few"

VARIABLES: dict[str, Variable] = {
    "HOST": Variable("0.0.0.0", HONOURED, "--http"),
    "PORT": Variable("8080", HONOURED, "--http"),
    "DEBUG_HOST": Variable(
        "0.0.0.0", IGNORED, note="no debug listener: /metrics and the probes are on the HTTP port"
    ),
    "DEBUG_PORT": Variable(
        "6070",
        IGNORED,
        note="no debug listener: /metrics and the probes are on the HTTP port",
        warn=True,
    ),
    "GRPC_UDS": Variable("", HONOURED, "--grpc"),
    "GRPC_HOST": Variable("0.0.0.0", HONOURED, "--grpc"),
    "GRPC_PORT": Variable("8081", HONOURED, "--grpc"),
    "GRPC_MAX_CONNECTION_AGE": Variable(
        "24h", IGNORED, note="connections stay open; Envoy balances its calls over them"
    ),
    "GRPC_MAX_CONNECTION_AGE_GRACE": Variable(
        "1h", IGNORED, note="connections stay open; Envoy balances its calls over them"
    ),
    "GRPC_SERVER_USE_TLS": Variable("false", HONOURED, "--grpc-tls-cert"),
    "GRPC_SERVER_TLS_CERT": Variable("", HONOURED, "--grpc-tls-cert"),
    "GRPC_SERVER_TLS_KEY": Variable("", HONOURED, "--grpc-tls-key"),
    "GRPC_CLIENT_TLS_CACERT": Variable("", HONOURED, "--grpc-tls-client-ca"),
    "GRPC_CLIENT_TLS_SAN": Variable("", HONOURED, "--grpc-tls-client-san"),
    "LOG_LEVEL": Variable("WARN", HONOURED, "--log-level"),
    "LOG_FORMAT": Variable("text", HONOURED, "--log-format"),
    "CONFIG_TYPE": Variable(
        "FILE", CHECKED, note="ratekeeper reads rule files, not an xDS server", accepts="FILE"
    ),
    "FORCE_START_WITHOUT_INITIAL_CONFIG": Variable(
        "false", IGNORED, note="the rule files are read before ratekeeper listens"
    ),
    "CONFIG_GRPC_XDS_NODE_ID": Variable("default", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_NODE_METADATA": Variable("", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_SERVER_URL": Variable("localhost:18000", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": Variable("3s", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": Variable("", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_SERVER_USE_TLS": Variable("false", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": Variable("", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": Variable("", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": Variable("", IGNORED, note=_XDS),
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN": Variable("", IGNORED, note=_XDS),
    "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": Variable("10s", IGNORED, note=_XDS),
    "XDS_CLIENT_BACKOFF_MAX_INTERVAL": Variable("60s", IGNORED, note=_XDS),
    "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": Variable("0.5", IGNORED, note=_XDS),
    "XDS_CLIENT_BACKOFF_JITTER": Variable("true", IGNORED, note=_XDS),
    "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": Variable("", IGNORED, note=_XDS),
    "USE_DOG_STATSD": Variable("false", HONOURED, "--dogstatsd"),
    "USE_DOG_STATSD_MOGRIFIERS": Variable("", HONOURED, "--dogstatsd-mogrifiers"),
    "USE_STATSD": Variable("true", HONOURED, "--statsd"),
    "STATSD_HOST": Variable("localhost", HONOURED, "--statsd"),
    "STATSD_PORT": Variable("8125", HONOURED, "--statsd"),
    "EXTRA_TAGS": Variable("", HONOURED, "--stats-tags"),
    "STATS_FLUSH_INTERVAL": Variable("10s", HONOURED, "--stats-flush-interval"),
    "DISABLE_STATS": Variable("false", HONOURED, "--statsd"),
    "USE_PROMETHEUS": Variable("false", HONOURED, "--stats-prometheus"),
    "PROMETHEUS_ADDR": Variable(":9090", HONOURED, "--stats-prometheus"),
    "PROMETHEUS_PATH": Variable("/metrics", HONOURED, "--stats-prometheus-path"),
    "PROMETHEUS_MAPPER_YAML": Variable("", HONOURED, "--stats-prometheus-mapper"),
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": Variable(
        "false",
        IGNORED,
        note="it scales the reference's response-time timer, which ratekeeper does not send "
        "(its latencies are ratekeeper_* histograms in seconds, at the HTTP port's /metrics)",
    ),
    "RUNTIME_ROOT": Variable("/srv/runtime_data/current", HONOURED, "--rules"),
    "RUNTIME_SUBDIRECTORY": Variable("", HONOURED, "--rules"),
    "RUNTIME_APPDIRECTORY": Variable("config", HONOURED, "--rules"),
    "RUNTIME_IGNOREDOTFILES": Variable("false", HONOURED, "--rules"),
    "RUNTIME_WATCH_ROOT": Variable("true", HONOURED, "--rules"),
    "EXPIRATION_JITTER_MAX_SECONDS": Variable(
        "300", IGNORED, note="each key expires when its own window ends"
    ),
    "LOCAL_CACHE_SIZE_IN_BYTES": Variable(
        "0",
        IGNORED,
        note="an optimisation only: every decision is the store's; the library's "
        "over_limit_cache store option is the equivalent",
    ),
    "NEAR_LIMIT_RATIO": Variable("0.8", HONOURED, "--near-limit-ratio"),
    "CACHE_KEY_PREFIX": Variable("", HONOURED, "--store"),
    "BACKEND_TYPE": Variable(
        "redis", CHECKED, note="ratekeeper's stores are Redis or memory", accepts="redis"
    ),
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": Variable("false", HONOURED, "--debt"),
    "LIMIT_RESPONSE_HEADERS_ENABLED": Variable("false", HONOURED, "--envoy-headers"),
    "LIMIT_LIMIT_HEADER": Variable("RateLimit-Limit", HONOURED, "--envoy-header-names"),
    "LIMIT_REMAINING_HEADER": Variable("RateLimit-Remaining", HONOURED, "--envoy-header-names"),
    "LIMIT_RESET_HEADER": Variable("RateLimit-Reset", HONOURED, "--envoy-header-names"),
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": Variable("false", HONOURED, "--healthcheck-rules"),
    "REDIS_SOCKET_TYPE": Variable("unix", HONOURED, "--store"),
    "REDIS_TYPE": Variable("SINGLE", HONOURED, "--store"),
    "REDIS_URL": Variable("/var/run/nutcracker/ratelimit.sock", HONOURED, "--store"),
    "REDIS_POOL_SIZE": Variable("10", IGNORED, note=_POOL),
    "REDIS_AUTH": Variable("", HONOURED, "--store"),
    "REDIS_TLS": Variable("false", HONOURED, "--store"),
    "REDIS_TLS_CLIENT_CERT": Variable("", HONOURED, "--store"),
    "REDIS_TLS_CLIENT_KEY": Variable("", HONOURED, "--store"),
    "REDIS_TLS_CACERT": Variable("", HONOURED, "--store"),
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": Variable("false", HONOURED, "--store"),
    "REDIS_PIPELINE_WINDOW": Variable("0", IGNORED, note=_PIPELINE),
    "REDIS_PIPELINE_LIMIT": Variable("0", IGNORED, note="unused by the reference itself"),
    "REDIS_CLUSTER_PIPELINE_PARALLELISM": Variable("1", IGNORED, note=_PIPELINE),
    "REDIS_PERSECOND": Variable(
        "false",
        CHECKED,
        note="ratekeeper keeps every limit in one store: true is accepted when "
        "REDIS_PERSECOND_* name the same server as REDIS_*",
        accepts="false, or true with the same server",
    ),
    "REDIS_PERSECOND_SOCKET_TYPE": Variable("unix", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_PERSECOND_TYPE": Variable("SINGLE", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_PERSECOND_URL": Variable(
        "/var/run/nutcracker/ratelimitpersecond.sock", CHECKED, note=_PER_SECOND, accepts=_SAME
    ),
    "REDIS_PERSECOND_POOL_SIZE": Variable("10", IGNORED, note=_POOL),
    "REDIS_PERSECOND_AUTH": Variable("", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_PERSECOND_TLS": Variable("false", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_SENTINEL_AUTH": Variable("", HONOURED, "--store"),
    "REDIS_PERSECOND_SENTINEL_AUTH": Variable("", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_PERSECOND_PIPELINE_WINDOW": Variable("0", IGNORED, note=_PIPELINE),
    "REDIS_PERSECOND_PIPELINE_LIMIT": Variable("0", IGNORED, note="unused by the reference itself"),
    "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": Variable("1", IGNORED, note=_PIPELINE),
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": Variable("false", HONOURED, "--healthcheck-store"),
    "REDIS_TIMEOUT": Variable("10s", HONOURED, "--store"),
    "REDIS_PERSECOND_TIMEOUT": Variable("10s", CHECKED, note=_PER_SECOND, accepts=_SAME),
    "REDIS_POOL_ON_EMPTY_BEHAVIOR": Variable("WAIT", IGNORED, note=_POOL),
    "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": Variable("WAIT", IGNORED, note=_POOL),
    "REDIS_STARTUP_INITIAL_INTERVAL": Variable(
        "1s",
        IGNORED,
        note="ratekeeper starts without waiting for Redis; /readyz answers 503 and "
        "--on-store-error decides until Redis answers",
    ),
    "REDIS_STARTUP_MAX_INTERVAL": Variable(
        "30s", IGNORED, note="ratekeeper starts without waiting for Redis"
    ),
    "REDIS_STARTUP_MAX_ELAPSED_TIME": Variable(
        "0", IGNORED, note="ratekeeper starts without waiting for Redis"
    ),
    "MEMCACHE_HOST_PORT": Variable("", IGNORED, note=_MEMCACHE),
    "MEMCACHE_MAX_IDLE_CONNS": Variable("2", IGNORED, note=_MEMCACHE),
    "MEMCACHE_SRV": Variable("", IGNORED, note=_MEMCACHE),
    "MEMCACHE_SRV_REFRESH": Variable("0", IGNORED, note=_MEMCACHE),
    "MEMCACHE_TLS": Variable("false", IGNORED, note=_MEMCACHE),
    "MEMCACHE_TLS_CLIENT_CERT": Variable("", IGNORED, note=_MEMCACHE),
    "MEMCACHE_TLS_CLIENT_KEY": Variable("", IGNORED, note=_MEMCACHE),
    "MEMCACHE_TLS_CACERT": Variable("", IGNORED, note=_MEMCACHE),
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": Variable("false", IGNORED, note=_MEMCACHE),
    "SHADOW_MODE": Variable("false", HONOURED, "--shadow-mode"),
    "QUOTA_MODE": Variable("false", HONOURED, "--quota-mode"),
    "RESPONSE_DYNAMIC_METADATA": Variable("false", HONOURED, "--dynamic-metadata"),
    "MERGE_DOMAIN_CONFIG": Variable("false", HONOURED, "--merge-domains"),
    # The tracing variables are only read with TRACING_ENABLED=true, as the reference reads them.
    "TRACING_ENABLED": Variable("false", HONOURED, "--tracing"),
    "TRACING_SERVICE_NAME": Variable("RateLimit", HONOURED, "--trace-service-name"),
    "TRACING_SERVICE_NAMESPACE": Variable("", HONOURED, "--trace-service-namespace"),
    "TRACING_SERVICE_INSTANCE_ID": Variable("", HONOURED, "--trace-service-instance-id"),
    "TRACING_EXPORTER_PROTOCOL": Variable("http", HONOURED, "--tracing"),
    "TRACING_SAMPLING_RATE": Variable("1", HONOURED, "--trace-sample-rate"),
}
