"""The wrappers stacked on a backend: each is a store that holds another and adds one thing.
``open_store`` stacks them on a Redis store, outermost first:

- ``resilience``: the failure policy and its circuit breakers (``breakers``);
- ``leasing``: leased limits answered from slices of their budget (``slices``);
- ``overlimit``: known denials answered locally (opt-in);
- ``deferred``: a store opened on its first use (a Redis Cluster's).
"""
