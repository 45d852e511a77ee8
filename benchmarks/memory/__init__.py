"""The in-memory benchmarks: ratekeeper's ``MemoryStore`` against its peers' in-memory stores
(``suite``), bytes per idle key (``footprint``), and latency as the store fills (``expiry``:
``python -m benchmarks.memory.expiry``)."""
