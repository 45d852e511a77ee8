"""The decision service's composition root: its settings (``settings``), the app built from
them and wired over one engine (``app``), and the servers that run it: ``ratekeeper serve``
on uvicorn and grpc.aio, or on pyvoy (``pyvoy_server``, ``pyvoy_app``). Nothing below it
imports it.

``import ratekeeper.service.runtime.settings`` brings no web framework in: the command line
reads the settings without the ``server`` extra.
"""
