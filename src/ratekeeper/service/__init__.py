"""ratekeeper's decision service: the network surfaces that answer gateways and applications."""
