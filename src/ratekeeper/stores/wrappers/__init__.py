"""The wrappers stacked on a backend: each is a store that holds another (typed by the contract,
``ratekeeper.stores.contract``) and adds one thing. ``open_store`` stacks them on a Redis store,
outermost first:

- ``resilience``: the failure policy and its circuit breakers (``policy``, ``breakers``);
  ``async_resilience`` is the asyncio twin;
- ``leasing``: leased limits answered from slices of their budget (``slices``);
  ``async_leasing`` is the asyncio twin;
- ``overlimit``: known denials answered locally (opt-in);
- ``deferred``: a store opened on its first use (a Redis Cluster's).
"""
