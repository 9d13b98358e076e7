"""python -m bench [--smoke] [--only NAME ...]: run the benchmarks and print the figures."""

from __future__ import annotations

import argparse
import platform
import sys

from bench import concurrency, create, exec_latency, idle_memory, throughput
from bench.common import daemon, report
from tests.conftest import daemon_owner

ALL = ("exec", "create", "throughput", "concurrency", "idle")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks it still runs")
    parser.add_argument("--only", nargs="*", choices=ALL, default=list(ALL))
    args = parser.parse_args()
    smoke = args.smoke
    figures = []
    print(f"machine: {platform.node()} {platform.machine()} {platform.python_version()}, "
          f"{__import__('os').cpu_count()} cpus{' (smoke sizes)' if smoke else ''}")
    with daemon() as d:
        assert d.proc is not None
        if "exec" in args.only:
            figures.append(exec_latency.run(d.target, d.token, 20 if smoke else 300))
        if "create" in args.only:
            figure, base = create.run_cold(d.target, d.token, 3 if smoke else 20)
            figures.append(figure)
        if "throughput" in args.only:
            figures += throughput.run(d.target, d.token, d.proc.pid, 20 if smoke else 500)
        if "concurrency" in args.only:
            figures.append(concurrency.run(d.target, d.token, daemon_owner(d.data_dir),
                                           5 if smoke else 50, 4 if smoke else 20))
        if "idle" in args.only:
            figures.append(idle_memory.run(d.target, d.token, d.proc.pid, 5 if smoke else 100))
    if "create" in args.only:
        with daemon("--warm-pool", "2" if smoke else "4") as d:
            figures.append(create.run_warm(d.target, d.token, 3 if smoke else 20, base))
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
