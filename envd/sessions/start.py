"""Starting a sandbox: create it and connect to its runner, or leave nothing behind."""

from __future__ import annotations

import asyncio
import contextlib

from envd.backends.base import Backend, BackendError, SandboxHandle, SandboxSpec
from envd.channel import ChannelClosed, RunnerCallError, RunnerChannel
from envd.errors import SandboxUnavailable


async def _create_and_connect(
    backend: Backend, spec: SandboxSpec
) -> tuple[SandboxHandle, RunnerChannel]:
    handle = await backend.create(spec)
    return handle, await RunnerChannel.connect(handle.socket_path)


async def start_sandbox(backend: Backend, spec: SandboxSpec) -> tuple[SandboxHandle, RunnerChannel]:
    """The sandbox of ``spec``, running, with a connected channel.

    On failure the sandbox is removed and SandboxUnavailable raised. On cancellation (a caller
    that went away, a shutdown) the start in progress is let finish first and then removed: the
    Docker call runs in a thread and would otherwise create the container after the removal."""
    start = asyncio.ensure_future(_create_and_connect(backend, spec))
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            _handle, channel = await start
            await channel.close()
        with contextlib.suppress(BaseException):
            await backend.destroy(spec.session_id)
        raise
    except (BackendError, ChannelClosed, RunnerCallError, OSError) as exc:
        with contextlib.suppress(BackendError):
            await backend.destroy(spec.session_id)
        raise SandboxUnavailable(f"cannot start the sandbox: {exc}") from exc
