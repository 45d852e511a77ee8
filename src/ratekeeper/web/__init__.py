"""What every HTTP surface of ratekeeper shares (the decision service and the middleware): the
rate-limit response headers and problem-details bodies. Free of any web framework."""
