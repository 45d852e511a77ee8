"""The web integrations' benchmarks (``python -m benchmarks --web``): what ratekeeper's
middleware and per-route limits add to a request, against slowapi, Flask-Limiter and
django-ratelimit."""
