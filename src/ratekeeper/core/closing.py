"""``with`` and ``async with`` for what ratekeeper opens: leaving the block calls ``close()``.

``Limiter``, ``Engine`` and their asyncio twins inherit one of these; each defines ``close``,
which may be called again without harm.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """``with thing: ...`` closes ``thing`` on leaving."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """``async with thing: ...`` closes ``thing`` (awaited) on leaving."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
