"""Idle memory per session: container memory plus the daemon's share, at N idle sessions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.common import Figure, rss_kib
from engine.client import EnvdClient


def _container_memory(container_id: str) -> int:
    for path in (f"/sys/fs/cgroup/memory/docker/{container_id}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.current"):
        try:
            return int(Path(path).read_text())
        except OSError:
            continue
    return 0


async def _run(target: str, token: str, pid: int, count: int) -> tuple[float, float]:
    before = rss_kib(pid)
    async with EnvdClient(target, token) as client:
        sessions = []
        try:
            for _ in range(count):
                sessions.append(await client.create_session())
            await asyncio.sleep(2)
            containers = sum(_container_memory(s.container_id) for s in sessions) / count
            daemon = (rss_kib(pid) - before) * 1024 / count
        finally:
            for session in sessions:
                await client.close_session(session.session_id)
    return containers, daemon


def run(target: str, token: str, pid: int, count: int) -> Figure:
    containers, daemon = asyncio.run(_run(target, token, pid, count))
    per_session = (containers + max(daemon, 0)) / 2**20
    return Figure(f"idle memory per session at {count} (MB)", per_session, 15.0, "  ",
                  f"container {containers / 2**20:.2f} MB + daemon share {daemon / 2**20:.2f} MB;"
                  " baseline column: the 15 MB target")
