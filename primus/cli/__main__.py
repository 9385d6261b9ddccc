"""``python -m primus.cli`` runs the ``primus`` command."""

from primus.cli.main import main

main()
