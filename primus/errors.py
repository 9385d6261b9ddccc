"""Root of Primus's error tree.

Every subsystem defines its own base (``SpecError``, ``StoreError``, ``LaunchError``...) under
:class:`PrimusError` in its ``api.py``; adapters convert library errors at the boundary.
"""


class PrimusError(Exception):
    """Base of every error Primus raises on purpose."""
