"""The rules the gRPC tests decide by, in the test process and in the app pyvoy runs for them
(``pyvoy_grpc_app``)."""

RULES = """
domain: test
descriptors:
  - key: generic_key
    value: default
    rate_limit: {unit: minute, requests_per_unit: 3, name: everyone}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: service_1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota: {name: service_2, weight: 2}
      zone: east
"""
