"""The Primus API: the gRPC service defined in proto/primus/v1/, and conversions between
Primus's records and its messages (:mod:`primus.api.convert`).

The only package that imports code generated from proto/ (STYLE.md rule 1).
"""
