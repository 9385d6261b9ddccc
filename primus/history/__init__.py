"""The history of finished applications: archived from etcd, kept in SQL (docs/operations.md)."""
