"""The tree stays ruff and mypy clean, the generated code fresh, and the core free of grpc."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff() -> None:
    result = run(str(BIN / "ruff"), "check", "envd", "engine", "bench", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = run(sys.executable, "-m", "mypy", "envd", "engine")
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_code_is_fresh() -> None:
    result = run("make", "--no-print-directory", "proto-check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_core_does_not_import_grpc() -> None:
    """Wire types stop at the gRPC edge (envd/server, envd/v1) and the client module."""
    core = [p for p in (ROOT / "envd").rglob("*.py")
            if not {"server", "v1"} & set(p.relative_to(ROOT / "envd").parts)]
    offenders = []
    for path in core:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "grpc" or n.startswith(("grpc.", "envd.v1")) for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    allowed = {"envd/envctl.py"}  # a client program, like engine/client.py
    assert set(offenders) <= allowed, offenders
