"""The reference's Redis variables as one store URL (``ratekeeper.stores.redis.clients``).

===================================  ===================================================
``REDIS_TYPE``, ``REDIS_SOCKET_TYPE``  the URL
===================================  ===================================================
``SINGLE``, ``tcp``                  ``redis://[user:password@]REDIS_URL/0`` (``rediss://``
                                     with ``REDIS_TLS``); ``REDIS_URL`` is ``host:port``
``SINGLE``, ``unix``                 ``unix://[user:password@]REDIS_URL?db=0``; ``REDIS_URL``
                                     is the socket's absolute path
``CLUSTER``                          ``redis+cluster://[...@]REDIS_URL``: ``host:port,...``
``SENTINEL``                         ``redis+sentinel://[...@]host:port,.../master`` from
                                     ``REDIS_URL``, ``master,host:port,...``
===================================  ===================================================

``REDIS_AUTH`` is ``password`` or ``user:password``; so is ``REDIS_SENTINEL_AUTH``, the
sentinels' own (with ``REDIS_TYPE=SENTINEL`` only, as the reference reads it), which becomes
``?sentinel_password=`` (and ``&sentinel_username=``); ``REDIS_TIMEOUT`` becomes ``?timeout=``
when set (unset, ratekeeper's own 0.25 s stands rather than the reference's 10 s, so that a
store that fails is answered by the failure policy at once); ``CACHE_KEY_PREFIX`` becomes
``?prefix=CACHE_KEY_PREFIXrk``; ``REDIS_TLS_CACERT``, ``REDIS_TLS_CLIENT_CERT``,
``REDIS_TLS_CLIENT_KEY`` and ``REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`` become redis-py's
``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` and ``ssl_check_hostname=false``.
"""

from __future__ import annotations

import logging
import os
from urllib.parse import quote, urlencode

from ratekeeper.core.inputs import decimal
from ratekeeper.service.compat.reader import Notes, Reader, Refused, refusal

#: ratekeeper's own key prefix, after ``CACHE_KEY_PREFIX``.
KEY_PREFIX = "rk"
#: The longest call timeout a store takes (``clients.timeout_of``).
MAX_TIMEOUT = 3600.0


def store_url(env: Reader, notes: Notes) -> str:
    """The store the Redis variables describe; ``Refused`` for what ratekeeper cannot open."""
    backend = env.text("BACKEND_TYPE")
    if backend not in ("redis", ""):
        why = "memcache is not supported" if backend == "memcache" else "expected redis"
        raise refusal("BACKEND_TYPE", backend, why + "; ratekeeper's stores are Redis or memory")
    url = _redis(env, "REDIS_")
    if env.switch("REDIS_PERSECOND"):
        if _redis(env, "REDIS_PERSECOND_") != url:
            raise refusal(
                "REDIS_PERSECOND",
                env.text("REDIS_PERSECOND"),
                "ratekeeper keeps every limit in one store, and REDIS_PERSECOND_* name another "
                "server than REDIS_*: unset REDIS_PERSECOND, so that per-second limits share "
                "the main Redis",
            )
        notes.append(
            (
                logging.INFO,
                "$REDIS_PERSECOND=true: REDIS_PERSECOND_* name the same server as REDIS_*, "
                "which keeps every limit",
            )
        )
    return url


def _redis(env: Reader, prefix: str) -> str:
    kind = env.text(prefix + "TYPE").lower()
    socket = env.text(prefix + "SOCKET_TYPE").lower()
    address = env.text(prefix + "URL")
    tls = env.switch(prefix + "TLS")
    if kind not in ("single", "cluster", "sentinel"):
        raise refusal(
            prefix + "TYPE", env.text(prefix + "TYPE"), "expected SINGLE, SENTINEL or CLUSTER"
        )
    if tls and (kind != "single" or socket == "unix"):
        where = f"REDIS_TYPE={kind.upper()}" if kind != "single" else "a Unix socket"
        raise refusal(
            prefix + "TLS",
            env.text(prefix + "TLS"),
            f"ratekeeper opens no TLS connection to {where}",
        )
    query = _query(env, prefix, tls, sentinel=kind == "sentinel")
    userinfo = _userinfo(env.text(prefix + "AUTH"))
    if kind == "cluster":
        hosts = _hosts(prefix + "URL", address.split(","))
        return f"redis+cluster://{userinfo}{','.join(hosts)}{query}"
    if kind == "sentinel":
        master, *sentinels = address.split(",")
        if not master or not sentinels:
            raise Refused(
                f"${prefix}URL: expected master,host:port,... for a Sentinel, not {address!r}"
            )
        hosts = _hosts(prefix + "URL", sentinels)
        return f"redis+sentinel://{userinfo}{','.join(hosts)}/{master}{query}"
    if socket == "unix":
        if not address:
            raise Refused(f"${prefix}URL: expected the path of Redis's Unix socket")
        if not os.path.isabs(address):  # host:port, most likely, with tcp forgotten
            given = "set to unix" if env.given(prefix + "SOCKET_TYPE") else "unix by default"
            raise Refused(
                f"${prefix}URL={address}: expected the absolute path of Redis's Unix socket, "
                f"as ${prefix}SOCKET_TYPE is {given}; for host:port set "
                f"{prefix}SOCKET_TYPE=tcp"
            )
        path = quote(os.path.abspath(address), safe="/")
        return f"unix://{userinfo}{path}?db=0{'&' + query[1:] if query else ''}"
    if socket not in ("tcp", "tcp4", "tcp6"):
        raise refusal(
            prefix + "SOCKET_TYPE", env.text(prefix + "SOCKET_TYPE"), "expected tcp or unix"
        )
    (host,) = _hosts(prefix + "URL", [address])
    return f"{'rediss' if tls else 'redis'}://{userinfo}{host}/0{query}"


def _hosts(variable: str, addresses: list[str]) -> list[str]:
    for address in addresses:
        host, _, port = address.strip().rpartition(":")
        malformed = not host or any(c in host for c in "/@?#") or any(c.isspace() for c in host)
        if malformed or not decimal(port) or not 0 < int(port) < 65536:
            raise Refused(f"${variable}: expected host:port, not {address!r}")
    return [address.strip() for address in addresses]


def _userinfo(auth: str) -> str:
    """``REDIS_AUTH`` as a URL's user information: ``password`` or ``user:password``, as the
    reference splits it at the first ``:``."""
    if not auth:
        return ""
    user, separator, password = auth.partition(":")
    if not separator:
        user, password = "", auth
    return f"{quote(user, safe='')}:{quote(password, safe='')}@"


def _query(env: Reader, prefix: str, tls: bool, *, sentinel: bool) -> str:
    options: list[tuple[str, str]] = []
    sentinel_auth = env.text(prefix + "SENTINEL_AUTH")
    if sentinel and sentinel_auth:  # as REDIS_AUTH: password, or user:password
        user, separator, password = sentinel_auth.partition(":")
        if separator:
            options.append(("sentinel_username", user))
        options.append(("sentinel_password", password if separator else sentinel_auth))
    if env.given(prefix + "TIMEOUT"):
        seconds = env.seconds(prefix + "TIMEOUT")
        if not 0 < seconds < MAX_TIMEOUT:
            raise refusal(
                prefix + "TIMEOUT",
                env.text(prefix + "TIMEOUT"),
                "ratekeeper times every Redis call out, after more than 0 and less than an hour",
            )
        options.append(("timeout", f"{seconds:g}"))
    key_prefix = env.text("CACHE_KEY_PREFIX")
    if key_prefix:
        if "{" in key_prefix or "}" in key_prefix:
            raise refusal(
                "CACHE_KEY_PREFIX",
                key_prefix,
                "a prefix with { or } would move the keys' Redis Cluster hash tag",
            )
        options.append(("prefix", key_prefix + KEY_PREFIX))
    if tls:
        for variable, option in (
            ("REDIS_TLS_CACERT", "ssl_ca_certs"),
            ("REDIS_TLS_CLIENT_CERT", "ssl_certfile"),
            ("REDIS_TLS_CLIENT_KEY", "ssl_keyfile"),
        ):
            if env.text(variable):
                options.append((option, env.text(variable)))
        if env.switch("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"):
            options.append(("ssl_check_hostname", "false"))
    return "?" + urlencode(options, safe="/:") if options else ""
