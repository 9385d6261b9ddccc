"""The repository's root and the real ``primus`` command line, run in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_primus(env: dict[str, str], *args: str, timeout: float = 120,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``primus`` command line in a subprocess."""
    return subprocess.run([sys.executable, "-m", "primus.cli", *args], env=env, cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout)
