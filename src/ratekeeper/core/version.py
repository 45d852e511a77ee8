"""ratekeeper's version, which the package, the command line and the service's OpenAPI
document report."""

VERSION = "0.1.0"
