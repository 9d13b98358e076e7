"""Many sessions executing at once: p50/p99 latency, errors, containers left afterwards."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from bench.common import Figure, percentile, summary
from engine.client import EnvdClient


async def _session_worker(client: EnvdClient, calls: int, samples: list[float],
                          errors: list[str]) -> None:
    try:
        session = await client.create_session()
    except Exception as exc:  # counted, not raised: the figure is the error count
        errors.append(f"create: {exc}")
        return
    try:
        for i in range(calls):
            start = time.perf_counter()
            final = None
            async for message in client.execute(session.session_id, "exec_command",
                                                json.dumps({"cmd": f"echo {i}"}), f"k{i}"):
                final = message
            samples.append(time.perf_counter() - start)
            if final is None or final.tool_call_output.stop_reason != "completed":
                errors.append(f"call {i}: {final}")
    except Exception as exc:
        errors.append(f"call: {exc}")
    finally:
        await client.close_session(session.session_id)


async def _run(target: str, token: str, sessions: int, calls: int) -> tuple[list[float], list[str]]:
    samples: list[float] = []
    errors: list[str] = []
    async with EnvdClient(target, token) as client:
        await asyncio.gather(*(_session_worker(client, calls, samples, errors)
                               for _ in range(sessions)))
    return samples, errors


def run(target: str, token: str, owner: str, sessions: int, calls: int) -> Figure:
    samples, errors = asyncio.run(_run(target, token, sessions, calls))
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=envd.owner={owner}"],
                          capture_output=True, text=True).stdout.split()
    p50, p99 = percentile(samples, 50), percentile(samples, 99)
    return Figure(f"concurrency {sessions}x{calls}: p99/p50", p99 / p50 if p50 else 0, 10.0, "  ",
                  f"{summary(samples)}\nerrors {len(errors)}, containers left {len(left)}"
                  + (f"\nfirst error: {errors[0]}" if errors else "")
                  + "\nbaseline column: the p99 <= 10 x p50 target")
