"""One small run of every benchmark, so that they cannot rot. Timings are printed, not judged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _envd_containers() -> set[str]:
    out = subprocess.run(["docker", "ps", "-aq", "--filter", "label=envd.managed"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_benchmarks_run(docker_ready: None) -> None:
    before = _envd_containers()
    result = subprocess.run([sys.executable, "-m", "bench", "--smoke"], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    print(result.stdout)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("exec round trip", "create -> first exec, cold", "create -> first exec, warm",
                 "throughput", "daemon RSS growth", "concurrency", "idle memory per session"):
        assert name in result.stdout
    assert "errors 0, containers left 0" in result.stdout
    # The benchmark daemons (warm pool included) leave nothing behind.
    assert _envd_containers() <= before
