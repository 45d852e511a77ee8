"""The leased-quota benchmarks (``python -m benchmarks --leases``): one hot key under a leased
limit (``Limit(sync="leased")``) against the same limit exact, in the library (4 processes,
``benchmarks.leases.library``) and through 3 ``ratekeeper serve`` instances behind the shipped
nginx file (``benchmarks.leases.service``), on a redis-server of their own."""
