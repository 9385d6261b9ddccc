"""The Python code generated from proto/ and checked in under primus/api/v1/ is current, and
only primus/api/ imports it."""

from __future__ import annotations

import ast
import filecmp
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "primus"
GENERATED = PACKAGE / "api" / "v1"
PATTERNS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")


def _generated_files(directory: Path) -> set[str]:
    return {path.name for pattern in PATTERNS for path in directory.glob(pattern)}


def test_checked_in_code_is_what_scripts_gen_proto_generates(tmp_path: Path) -> None:
    run = subprocess.run([str(REPO / "scripts" / "gen-proto"), str(tmp_path)],
                         env={**os.environ, "PYTHON": sys.executable},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (
        f"scripts/gen-proto failed (grpcio-tools is in the test extra):\n{run.stderr}")
    fresh = tmp_path / "primus" / "api" / "v1"
    expected, checked_in = _generated_files(fresh), _generated_files(GENERATED)
    assert expected, f"scripts/gen-proto generated nothing into {fresh}"
    differing = sorted(name for name in expected & checked_in
                       if not filecmp.cmp(fresh / name, GENERATED / name, shallow=False))
    problems = [f"missing: {', '.join(sorted(expected - checked_in))}" if expected - checked_in
                else "",
                f"left from a removed .proto: {', '.join(sorted(checked_in - expected))}"
                if checked_in - expected else "",
                f"differ from proto/: {', '.join(differing)}" if differing else ""]
    assert not any(problems), (
        "the generated code in primus/api/v1/ is stale; run scripts/gen-proto and commit: "
        + "; ".join(p for p in problems if p))


def _imports_generated_code(module: str) -> bool:
    return (module.startswith(("primus.api.v1", "google.protobuf", "google.rpc"))
            or module.endswith(("_pb2", "_pb2_grpc")))


def test_only_primus_api_imports_generated_protobuf_code():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PACKAGE / "api"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            if any(map(_imports_generated_code, modules)):
                importers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not importers, (
        f"only primus/api/ may import code generated from proto/ (STYLE.md rule 1): {importers}")
