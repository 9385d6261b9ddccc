"""Helpers shared by test modules (as kazoo's ``testing`` harness): imported, never collected."""
