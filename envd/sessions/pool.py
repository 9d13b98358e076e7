"""The warm pool: sandboxes started ahead of time, so that CreateSession is a claim.

A warm sandbox already has its session id (container, volume and directories are named after
it), a running runner and a connected channel. Nothing else is bound to it until it is claimed:
the vault travels with each command, the workspace and scratchpad are empty, labels and quotas
live in the daemon. Warm sandboxes are not in the registry, so after a crash the next start
reaps them like any unclaimed container; a clean shutdown removes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from envd.backends.base import Backend, BackendError, SandboxHandle, SandboxSpec
from envd.channel import RunnerChannel
from envd.errors import SandboxUnavailable
from envd.metrics import Metrics
from envd.sessions.model import new_session_id
from envd.sessions.start import start_sandbox

log = logging.getLogger("envd.pool")
_RETRY_S = 5.0


@dataclass
class WarmSandbox:
    spec: SandboxSpec
    handle: SandboxHandle
    channel: RunnerChannel


def shape(spec: SandboxSpec) -> tuple[object, ...]:
    """What must match for a warm sandbox to serve a request."""
    return (spec.image, spec.memory_bytes, spec.cpus, spec.pids, spec.network, spec.isolation)


class WarmPool:
    def __init__(self, backend: Backend, template: SandboxSpec, size: int,
                 metrics: Metrics | None = None) -> None:
        self.backend = backend
        self.template = template
        self.size = size
        self.metrics = metrics
        self.ready: list[WarmSandbox] = []
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._filling = 0

    def start(self) -> None:
        if self.size > 0 and self._task is None:
            self._task = asyncio.create_task(self._fill())
            self._wanted.set()

    def claim(self, spec: SandboxSpec) -> WarmSandbox | None:
        if shape(spec) != shape(self.template):
            return None
        while self.ready:
            warm = self.ready.pop(0)
            self._wanted.set()
            self._report()
            if not warm.channel.closed:
                return warm
            asyncio.create_task(self._discard(warm))
        return None

    async def _fill(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            while len(self.ready) < self.size:
                spec = self.template.model_copy(update={"session_id": new_session_id()})
                try:
                    # A shutdown cancelling this lets the start finish and removes it.
                    handle, channel = await start_sandbox(self.backend, spec)
                except SandboxUnavailable as exc:
                    log.warning("cannot warm a sandbox: %s", exc)
                    await asyncio.sleep(_RETRY_S)
                    continue
                self.ready.append(WarmSandbox(spec, handle, channel))
                self._report()

    async def _discard(self, warm: WarmSandbox) -> None:
        await warm.channel.close()
        with contextlib.suppress(BackendError):
            await self.backend.destroy(warm.spec.session_id)

    def _report(self) -> None:
        if self.metrics is not None:
            self.metrics.pool_ready.set(len(self.ready))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        ready, self.ready = self.ready, []
        for warm in ready:
            await self._discard(warm)
        self._report()
