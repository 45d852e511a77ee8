"""The simulator's benchmarks (``python -m benchmarks --simulate``)."""
