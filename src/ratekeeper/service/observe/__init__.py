"""What the decision service tells of itself: its Prometheus metrics (``metrics``, with what is
read when scraped, ``scraped``, the latency histogram, ``latency``, and the totals of many
worker processes, ``multiprocess``), its log (``logs``), the access log (``access``), the
decision log (``decision_log``) and its OpenTelemetry traces (``tracing``), which name what
decided alike (``labels``).

``import ratekeeper.service.observe`` imports none of them: the metrics need the ``server``
extra (prometheus-client), the traces the ``tracing`` extra (the OpenTelemetry SDK).
"""
