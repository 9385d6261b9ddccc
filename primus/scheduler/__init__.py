"""Which host runs what: placement of executors and AM candidates, as pure functions."""
