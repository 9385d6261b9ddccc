"""The client layer: what the ``primus`` command and the API server do with applications and
hosts, implemented once. It reads and writes the application's desired state in etcd and starts
AM processes; it never runs or imports the AM itself.

The Primus API from Python, :class:`primus.api.client.Client`, sits above this layer (only
``primus/api/`` imports the code generated from proto/), and this layer imports nothing of it.
"""
