"""Session create -> first exec (cold, and from a warm pool) vs `docker run` of the image."""

from __future__ import annotations

import asyncio
import json
import time

import docker

from bench.common import IMAGE, Figure, percentile, summary
from engine.client import EnvdClient


async def _create_and_exec(target: str, token: str, runs: int, pause: float) -> list[float]:
    samples = []
    async with EnvdClient(target, token) as client:
        for i in range(runs):
            await asyncio.sleep(pause)  # lets a warm pool refill between samples
            start = time.perf_counter()
            session = await client.create_session()
            async for _ in client.execute(session.session_id, "exec_command",
                                          json.dumps({"cmd": "echo hi"}), f"c{i}"):
                pass
            samples.append(time.perf_counter() - start)
            await client.close_session(session.session_id)
    return samples


def _docker_run(runs: int) -> list[float]:
    client = docker.from_env()
    samples = []
    try:
        for _ in range(runs):
            start = time.perf_counter()
            client.containers.run(IMAGE, ["echo", "hi"], network_mode="none", remove=True)
            samples.append(time.perf_counter() - start)
    finally:
        client.close()
    return samples


def run_cold(target: str, token: str, runs: int) -> tuple[Figure, list[float]]:
    cold = asyncio.run(_create_and_exec(target, token, runs, 0))
    base = _docker_run(runs)
    figure = Figure("create -> first exec, cold p50", percentile(cold, 50) * 1000,
                    percentile(base, 50) * 1000, "ms",
                    f"envd cold:  {summary(cold)}\ndocker run: {summary(base)}")
    return figure, base


def run_warm(target: str, token: str, runs: int, baseline: list[float]) -> Figure:
    warm = asyncio.run(_create_and_exec(target, token, runs, 1.0))
    return Figure("create -> first exec, warm pool p50", percentile(warm, 50) * 1000,
                  percentile(baseline, 50) * 1000, "ms", f"envd warm:  {summary(warm)}")
