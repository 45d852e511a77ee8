"""The decision service: ratekeeper's engine on the wire (Envoy's gRPC rate-limit protocol, HTTP
JSON, nginx ``auth_request``). Every wire parses its request into one ``translate.Call``, has it
decided by the one engine, and formats the ``translate.Answer``: the adapters only translate.
"""
