"""What the surfaces share: Envoy-style statuses, rate-limit header shapes, problem details.

The decision service and the web middleware both speak these; they sit below both, so neither
surface imports the other.
"""
