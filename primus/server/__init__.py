"""``primus server``: the process that serves the Primus API (``primus.v1.Primus``) over etcd.

Stateless: all state stays in etcd, so several servers may serve one deployment. On the
embedded default it runs beside the embedded etcd, started and stopped like it
(:class:`~primus.client.embedded_server.EmbeddedServer`).
"""
