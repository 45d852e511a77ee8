"""The decision log: at debug, one line per descriptor decided, on every surface, with its
domain, rule, limit, result and remaining hits; its key only when asked for; and no decision
log at all below debug."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import grpc
import pytest

from ratekeeper.service.grpc import serve_grpc
from ratekeeper.service.observe.decision_log import DecisionLog
from ratekeeper.service.observe.metrics import Metrics
from ratekeeper.service.proto import ratelimit_pb2, rls_pb2, rls_pb2_grpc
from ratekeeper.service.runtime.app import build_parts, create_app
from ratekeeper.service.runtime.settings import Settings
from ratekeeper.stores.wrappers.resilience import AsyncResilient
from ratekeeper.testing import FakeClock
from tests.service.asgi import AppClient
from tests.service.observe.logged import RULES, Down, check, engine_of, no_secret

LOGGER = "ratekeeper.decisions"
PER_USER = "2/minute (fixed_window)"


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)


def logged(records: list[logging.LogRecord]) -> list[dict[str, Any]]:
    """Each decision line as its message and fields."""
    names = ("domain", "descriptor", "rule", "limit", "result", "remaining", "key")
    return [
        {"message": record.getMessage()}
        | {name: getattr(record, name) for name in names if hasattr(record, name)}
        for record in records
        if record.name == LOGGER and record.levelno == logging.DEBUG
    ]


def line(result: str, rule: str, limit: str, remaining: int | None, **more: Any) -> dict[str, Any]:
    fields = {"domain": "api", "descriptor": 0, "rule": rule, "limit": limit, "result": result}
    if remaining is not None:
        fields["remaining"] = remaining
    return {"message": result, **fields, **more}


def test_every_http_surface_logs_each_descriptor_and_no_key(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock)
    metrics = Metrics()
    metrics.track(engine)
    DecisionLog(engine)
    app = create_app(engine, close_engine=True, metrics=metrics)
    user = ("user", "alice-secret")
    with AppClient(app) as client:
        for _ in range(3):
            client.post("/v1/check", json=check(user))
        for _ in range(2):
            client.post("/v1/check", json=check(("plan", "free")))
        client.post("/v1/check", json={"key": "key-secret", "limit": "5/minute"})
        client.post("/v1/check/batch", json=[check(("path", "/a-secret")), check(user)])
        client.post("/json", json=check(("path", "/secret-path")))
        headers = {"X-RateLimit-Domain": "api", "X-Real-IP": "10.0.0.1", "X-User": "bob-secret"}
        client.get("/v1/nginx", headers=headers)
    path = "100/minute (fixed_window)"
    nginx = [
        line("allowed", "none", "none", None, descriptor=0),  # remote_address: no rule
        line("allowed", "per_user", PER_USER, 1, descriptor=1),
        line("allowed", "path", path, 99, descriptor=2),
        line("allowed", "none", "none", None, descriptor=3),  # method and path: no rule
    ]
    assert logged(caplog.records) == [
        line("allowed", "per_user", PER_USER, 1),
        line("allowed", "per_user", PER_USER, 0),
        line("limited", "per_user", PER_USER, 0),
        line("allowed", "plan=free", "1/minute (fixed_window)", 0),
        {
            **line("shadowed", "plan=free", "1/minute (fixed_window)", 0),
            "message": "shadowed: over its limit, let through",
        },
        line("allowed", "given", "5/minute (fixed_window)", 4, domain="keys"),
        line("allowed", "path", path, 99),
        line("limited", "per_user", PER_USER, 0, descriptor=0),
        line("allowed", "path", path, 99),  # another path
        *nginx,
    ]
    no_secret(caplog.records)


def test_grpc_calls_log_each_descriptor_and_no_key(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    Descriptor = ratelimit_pb2.RateLimitDescriptor
    entries = [("user", "carol-secret"), ("path", "/secret")]
    sent = rls_pb2.RateLimitRequest(
        domain="api",
        descriptors=[Descriptor(entries=[Descriptor.Entry(key=k, value=v)]) for k, v in entries],
    )

    async def main() -> None:
        engine = engine_of(clock)
        DecisionLog(engine)
        server, port = await serve_grpc(engine, "127.0.0.1:0")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(sent)
        finally:
            await server.stop(None)
            await engine.close()

    asyncio.run(main())
    assert logged(caplog.records) == [
        line("allowed", "per_user", PER_USER, 1),
        line("allowed", "path", "100/minute (fixed_window)", 99, descriptor=1),
    ]
    no_secret(caplog.records)


def test_the_keys_are_logged_when_asked_for(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_of(clock)
    DecisionLog(engine, keys=True)
    with AppClient(create_app(engine, close_engine=True)) as client:
        client.post("/v1/check", json=check(("user", "alice")))
        client.post("/v1/check", json={"key": "k", "limit": "5/minute"})
    assert [one["key"] for one in logged(caplog.records)] == ["api/user:alice", "keys/k"]


def test_a_decision_of_the_failure_policy_is_degraded_and_says_what_it_decided(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for policy, said in (("allow", "allowed"), ("deny", "limited")):
        caplog.clear()
        engine = engine_of(clock, AsyncResilient(Down(clock=clock), on_store_error=policy))
        DecisionLog(engine)
        with AppClient(create_app(engine, close_engine=True)) as client:
            client.post("/v1/check", json=check(("user", "a")))
        (one,) = logged(caplog.records)
        assert one["message"] == f"degraded: {said} by the failure policy"
        assert (one["result"], one["rule"]) == ("degraded", "per_user")


@pytest.mark.parametrize(("level", "on"), [(logging.DEBUG, True), (logging.INFO, False)])
def test_the_service_makes_it_only_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, level: int, on: bool
) -> None:
    """Below debug, the service's engine is observed as it was: nothing is added to a
    decision."""
    caplog.set_level(level, logger=LOGGER)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = Settings(rules=(str(rules),), config="sqlite://:memory:")
    engine = build_parts(settings, grpc_aio=False).engine
    try:
        assert isinstance(engine.observer, Metrics) is not on
        assert isinstance(getattr(engine.observer, "__self__", None), DecisionLog) is on
    finally:
        asyncio.run(engine.close())
