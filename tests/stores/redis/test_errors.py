"""What redis-py lets out when its asyncio cluster client loses a connection mid-call is a
store failure; the same exception from anywhere else stays a bug."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ratekeeper.core.errors import StoreError
from ratekeeper.stores.redis.errors import client_fault


def raised(call: Callable[[], object]) -> BaseException:
    with pytest.raises(BaseException) as caught:
        call()
    return caught.value


def defined_in(module: str) -> Callable[[], object]:
    """A function whose frame says it is from ``module``, which reads a missing attribute."""
    scope: dict[str, object] = {"__name__": module}
    exec("def write():\n    return None.writelines\n", scope)
    write: Callable[[], object] = scope["write"]  # type: ignore[assignment]
    return write


def test_an_attribute_error_inside_redis_py_is_a_store_failure() -> None:
    error = raised(defined_in("redis.asyncio.connection"))
    fault = client_fault(error)
    assert isinstance(fault, StoreError)
    assert fault.__cause__ is error
    assert "lost a connection" in str(fault)


def test_an_attribute_error_elsewhere_stays_a_bug() -> None:
    assert client_fault(raised(defined_in("ratekeeper.stores.redis.async_store"))) is None


def test_a_write_on_a_closed_transport_is_a_store_failure() -> None:
    error = RuntimeError(
        "unable to perform operation on <TCPTransport closed=True reading=False 0x7f>; "
        "the handler is closed"
    )
    assert isinstance(client_fault(error), StoreError)


@pytest.mark.parametrize("error", [RuntimeError("no running event loop"), ValueError("x")])
def test_any_other_error_stays_a_bug(error: BaseException) -> None:
    assert client_fault(error) is None
