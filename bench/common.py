"""Shared pieces: a daemon to measure, timing statistics, and the report table."""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.daemon import DaemonProcess

IMAGE = "envd-sandbox:latest"


@dataclass
class Figure:
    name: str
    value: float  # envd
    baseline: float
    unit: str
    detail: str = ""
    lower_is_better: bool = True

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples: list[float]) -> str:
    return (
        f"p50 {percentile(samples, 50) * 1000:.2f} ms, p99 {percentile(samples, 99) * 1000:.2f} ms,"
        f" mean {statistics.fmean(samples) * 1000:.2f} ms, n={len(samples)}"
    )


def report(figures: list[Figure]) -> None:
    print(f"{'benchmark':44} {'envd':>12} {'baseline':>12} {'ratio':>8}")
    for f in figures:
        print(
            f"{f.name:44} {f.value:>10.2f}{f.unit:>2} {f.baseline:>10.2f}{f.unit:>2} "
            f"{f.ratio:>8.3f}"
        )
        if f.detail:
            for line in f.detail.splitlines():
                print(f"    {line}")


@contextmanager
def daemon(*extra: str) -> Iterator[DaemonProcess]:
    root = Path(tempfile.mkdtemp(prefix="envd-bench-"))
    process = DaemonProcess(root / "data", image=IMAGE, extra_args=list(extra)).start(timeout=60)
    try:
        yield process
    finally:
        process.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start
