"""The web UI of ``primus server``: pages of applications, logs and hosts, kept live from etcd."""
