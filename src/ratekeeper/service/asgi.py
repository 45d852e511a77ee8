"""The ASGI interface as the service's own apps speak it, typed once: the metrics' app, the
gRPC app, the access log around the HTTP app, and the one app of both that pyvoy runs."""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: An ASGI application: ``await app(scope, receive, send)``.
App = Callable[[Scope, Receive, Send], Awaitable[None]]
