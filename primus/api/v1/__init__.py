"""Code generated from proto/primus/v1/ by scripts/gen-proto; do not edit. Checked in, and
checked to be current by tests/unit/test_proto_current.py."""
