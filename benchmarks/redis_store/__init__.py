"""The Redis benchmarks (``python -m benchmarks --redis``): ratekeeper's Redis store against
the peers' Redis backends, on a redis-server of their own (``server``). ``python -m
benchmarks.redis_store.profiling`` shows where a decision's time goes; ``python -m
benchmarks.redis_store.lua_server`` times the scripts on the server alone.

The package is not named ``redis``, so that nothing here can be mistaken for redis-py."""
