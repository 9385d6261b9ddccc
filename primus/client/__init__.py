"""The client layer: what the ``primus`` command (and, to come, the API server) does with
applications and hosts, implemented once. It reads and writes the application's desired state in
etcd and starts AM processes; it never runs or imports the AM itself.
"""
