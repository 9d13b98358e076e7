"""Output throughput: a command printing N MB through envd (head streamed, rest archived up to
the cap) vs the same command through `docker exec` into /dev/null; daemon RSS growth."""

from __future__ import annotations

import asyncio
import json
import time

import docker

from bench.common import IMAGE, Figure, rss_kib
from engine.client import EnvdClient


def _command(mb: int) -> str:
    return f"head -c {mb}M /dev/zero | tr '\\0' x"


async def _envd(target: str, token: str, mb: int) -> float:
    async with EnvdClient(target, token) as client:
        session = await client.create_session()
        try:
            start = time.perf_counter()
            async for _ in client.execute(session.session_id, "exec_command",
                                          json.dumps({"cmd": _command(mb)}), "t1"):
                pass
            return time.perf_counter() - start
        finally:
            await client.close_session(session.session_id)


def _docker_exec(mb: int) -> float:
    client = docker.from_env()
    container = client.containers.run(IMAGE, ["sleep", "3600"], detach=True, network_mode="none")
    try:
        start = time.perf_counter()
        result = container.exec_run(["bash", "-c", _command(mb)], stream=True)
        for _chunk in result.output:
            pass
        return time.perf_counter() - start
    finally:
        container.remove(force=True)
        client.close()


def run(target: str, token: str, daemon_pid: int, mb: int) -> list[Figure]:
    rss_before = rss_kib(daemon_pid)
    ours = asyncio.run(_envd(target, token, mb))
    rss_peak = rss_kib(daemon_pid, "VmHWM")
    base = _docker_exec(mb)
    return [
        Figure(f"throughput, {mb} MB output (MB/s)", mb / ours, mb / base, "  ",
               f"envd {ours:.2f} s, docker exec {base:.2f} s; ratio > 1 is faster than "
               "docker exec", lower_is_better=False),
        Figure("daemon RSS growth during it (MB)", max(0, rss_peak - rss_before) / 1024,
               100.0, "  ", "baseline column: the 100 MB budget"),
    ]
