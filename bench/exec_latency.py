"""exec_command of `true` through gRPC, vs `docker exec` of `true` via the Docker SDK."""

from __future__ import annotations

import asyncio
import json

import docker

from bench.common import IMAGE, Figure, percentile, summary
from engine.client import EnvdClient


async def _envd(target: str, token: str, runs: int) -> list[float]:
    loop = asyncio.get_running_loop()
    async with EnvdClient(target, token) as client:
        session = await client.create_session()
        samples = []
        try:
            for i in range(runs + 5):
                start = loop.time()
                async for _ in client.execute(session.session_id, "exec_command",
                                              json.dumps({"cmd": "true"}), f"b{i}"):
                    pass
                if i >= 5:  # warm-up
                    samples.append(loop.time() - start)
        finally:
            await client.close_session(session.session_id)
    return samples


def _docker_exec(runs: int) -> list[float]:
    import time

    client = docker.from_env()
    container = client.containers.run(IMAGE, ["sleep", "3600"], detach=True, network_mode="none")
    try:
        samples = []
        for i in range(runs + 5):
            start = time.perf_counter()
            container.exec_run(["true"])
            if i >= 5:
                samples.append(time.perf_counter() - start)
        return samples
    finally:
        container.remove(force=True)
        client.close()


def run(target: str, token: str, runs: int) -> Figure:
    ours = asyncio.run(_envd(target, token, runs))
    base = _docker_exec(runs)
    return Figure("exec round trip p50 (true)", percentile(ours, 50) * 1000,
                  percentile(base, 50) * 1000, "ms",
                  f"envd:        {summary(ours)}\ndocker exec: {summary(base)}")
