"""The decision service under load (``python -m benchmarks --service``): ``ratekeeper serve``
against a hello world on the same stack (``baseline``), driven by wrk and h2load (``load``);
what the service's metrics cost a decision (``python -m benchmarks.service.metrics_cost``), and
what the dashboard's recorder adds to it (``python -m benchmarks.service.dashboard_cost``)."""
