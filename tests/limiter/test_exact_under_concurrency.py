"""Real threads and real asyncio tasks on one key admit exactly the limit."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator

import pytest

from ratekeeper import Algorithm, AsyncLimiter, AsyncMemoryStore, Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock

#: The sliding counter is approximate in general, but at one frozen instant on a fresh key it
#: counts exactly too, so every algorithm is held to the same total.
EXACT = list(Algorithm)

THREADS = 8
HITS = 5_000
LIMIT = 10_000


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads as often as it can, to provoke races."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", EXACT)
@pytest.mark.usefixtures("fast_switching")
def test_threads_admit_exactly_the_limit(clock: FakeClock, algorithm: Algorithm) -> None:
    limiter = Limiter(MemoryStore(clock=clock))
    limit = Limit(LIMIT, 86_400, algorithm)
    admitted = [0] * THREADS
    start = threading.Barrier(THREADS)

    def worker(index: int) -> None:
        start.wait()
        hit = limiter.hit
        admitted[index] = sum(hit("hot", limit).allowed for _ in range(HITS))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(admitted) == LIMIT


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", EXACT)
def test_asyncio_tasks_admit_exactly_the_limit(clock: FakeClock, algorithm: Algorithm) -> None:
    limiter = AsyncLimiter(AsyncMemoryStore(clock=clock))
    limit = Limit(LIMIT, 86_400, algorithm)

    async def task() -> int:
        admitted = 0
        for _ in range(HITS):
            admitted += (await limiter.hit("hot", limit)).allowed
            await asyncio.sleep(0)  # let the other tasks interleave
        return admitted

    async def main() -> list[int]:
        return await asyncio.gather(*(task() for _ in range(THREADS)))

    counts = asyncio.run(main())
    assert sum(counts) == LIMIT
    assert min(counts) > 0  # the tasks really did interleave
