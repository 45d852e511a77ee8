"""Key functions: who a request counts against, as Envoy-style descriptor entries.

A ``Key`` turns a ``Request`` into entries such as ``(("remote_address", "10.0.0.1"),)``, or
into None when it does not apply (no user logged in, no such header): a limit whose key is None
counts nothing for that request. Keys compose with ``+``: ``client_ip() + field("username")``
is one key of two entries, counted together. The same entries serve both ways of deciding:
under a ``RateLimit`` they name the counter (``ratekeeper.core.store_keys.descriptor_key``,
escaped so that no two keys meet), and as descriptors they go to ``Engine.check`` to meet the rules.

Example::

    login = keys.client_ip(trusted=["10.0.0.0/8"]) + keys.field("username", str.casefold)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ratekeeper.core.networks import IPV4_PREFIX, IPV6_PREFIX
from ratekeeper.core.store_keys import descriptor_key
from ratekeeper.rules.model import Entry
from ratekeeper.web.addresses import ClientAddress
from ratekeeper.web.request import Request

#: What a key's part computes: a request's value, or None when it has none.
KeyFunction = Callable[[Request], str | None]


class Key:
    """Descriptor entries computed from a request: ``parts`` are ``(name, function)`` pairs.

    ``entries(request)`` gives one ``(name, value)`` per part, or None when any part has no
    value; calling the key gives the same as one string (``name:value|name:value``).
    ``needs_body`` says a part reads the request's body (the adapters then read it first).
    """

    __slots__ = ("needs_body", "parts")

    def __init__(self, name: str, function: KeyFunction, *, needs_body: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a key's name is a non-empty string, not {name!r}")
        if not callable(function):
            raise TypeError(f"a key's function must be callable, not {function!r}")
        self.parts: tuple[tuple[str, KeyFunction], ...] = ((name, function),)
        self.needs_body = needs_body

    @classmethod
    def _of(cls, parts: Iterable[tuple[str, KeyFunction]], needs_body: bool) -> Key:
        key = cls.__new__(cls)
        key.parts, key.needs_body = tuple(parts), needs_body
        return key

    def __add__(self, other: Key) -> Key:
        if not isinstance(other, Key):
            return NotImplemented
        return Key._of(self.parts + other.parts, self.needs_body or other.needs_body)

    def __repr__(self) -> str:
        return "Key(" + " + ".join(name for name, _ in self.parts) + ")"

    def entries(self, request: Request) -> tuple[Entry, ...] | None:
        """This key's entries for ``request``, or None when some part has no value."""
        found = []
        for name, function in self.parts:
            value = function(request)
            if value is None or value == "":
                return None
            found.append((name, str(value)))
        return tuple(found)

    def __call__(self, request: Request) -> str | None:
        entries = self.entries(request)
        return None if entries is None else descriptor_key(entries)


def as_key(key: Key | KeyFunction) -> Key:
    """``key`` as a ``Key``: a plain function of a request becomes the part named ``key``."""
    if isinstance(key, Key):
        return key
    if callable(key):
        return Key("key", key)
    raise TypeError(f"a key is a Key or a function of a Request, not {key!r}")


def client_ip(
    trusted: Iterable[str] = (),
    *,
    header: str = "X-Forwarded-For",
    ipv6_prefix: int = IPV6_PREFIX,
    ipv4_prefix: int = IPV4_PREFIX,
) -> Key:
    """The client's address block (``remote_address``), honouring ``header`` only from the
    ``trusted`` proxy networks: its /64 for IPv6 (``2001:db8:1:2::/64``) and the address
    itself for IPv4, unless ``ipv6_prefix`` (0 to 128) or ``ipv4_prefix`` (0 to 32) say
    otherwise; see ``ratekeeper.web.addresses``."""
    address = ClientAddress(trusted, header, ipv6_prefix=ipv6_prefix, ipv4_prefix=ipv4_prefix)
    return Key("remote_address", address)


def header(name: str, entry: str | None = None) -> Key:
    """Header ``name``'s value, as the entry ``entry`` (by default the header's name)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a header's name is a non-empty string, not {name!r}")
    lower = name.lower()
    return Key(entry or lower, lambda request: request.headers.get(lower))


def api_key(name: str = "X-API-Key") -> Key:
    """The API key a client sends in header ``name`` (``api_key``)."""
    return header(name, "api_key")


def user(get: Callable[[Request], Any] | None = None) -> Key:
    """The authenticated user (``user``): ``get(request)``, by default ``request.user`` as
    the adapter found it (ASGI's ``scope["user"]``, WSGI's ``REMOTE_USER``, Django's
    ``request.user``); None for an anonymous request."""
    if get is None:
        return Key("user", lambda request: request.user)
    found = get

    def value(request: Request) -> str | None:
        result = found(request)
        return None if result is None else str(result)

    return Key("user", value)


def path() -> Key:
    """The request's path, without its query string (``path``)."""
    return Key("path", lambda request: request.path)


def route() -> Key:
    """The matched route's template, such as ``/items/{id}`` (``route``), else the path: so
    that ``/items/1`` and ``/items/2`` count together."""
    return Key("route", lambda request: request.route or request.path)


def method() -> Key:
    """The request's method, upper case (``method``)."""
    return Key("method", lambda request: request.method)


def query(name: str, entry: str | None = None) -> Key:
    """Query parameter ``name``'s first value, as the entry ``entry`` (default ``name``)."""
    return Key(entry or name, lambda request: request.query(name))


def field(
    name: str, normalize: Callable[[str], str] | None = None, *, entry: str | None = None
) -> Key:
    """Field ``name`` of a form or JSON body, such as the username of a login, passed through
    ``normalize`` (``str.casefold`` counts ``Alice`` and ``alice`` together). The adapters read
    the body for it and hand the same bytes on to the application."""

    def value(request: Request) -> str | None:
        found = request.field(name)
        return found if found is None or normalize is None else normalize(found)

    return Key(entry or name, value, needs_body=True)


def generic(value: str = "default", name: str = "generic_key") -> Key:
    """A fixed entry, Envoy's ``generic_key``: every request counts together."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"a generic key's value is a non-empty string, not {value!r}")
    return Key(name, lambda request: value)


def custom(name: str, function: KeyFunction, *, needs_body: bool = False) -> Key:
    """The entry ``name`` computed by ``function(request)``."""
    return Key(name, function, needs_body=needs_body)
