"""Primus: distributed scheduling for ML training on bare-metal hosts, coordinated through etcd."""

__version__ = "0.1.0"
