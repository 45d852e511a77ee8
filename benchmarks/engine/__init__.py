"""The decision engine's benchmarks (``python -m benchmarks --engine``), and how long a large
rule file takes to load (``python -m benchmarks.engine.rules_load``)."""
