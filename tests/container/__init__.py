"""ratekeeper's container image, built from ``Containerfile`` and run with podman."""
