"""Command sessions: commands that outlive the call that started them.

The runner owns the processes and their unread output; this registry is the daemon's view of
which of them are command sessions (ids, commands, last use) and enforces the per-session limit
(evict exited ones first, then the least recently used). It also turns the exit of a background
command into a :class:`CommandFinished` event for the session's watchers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envd.channel import ChannelClosed, ProcStream, RunnerCallError, RunnerChannel
from envd.tools.base import ToolResult

MAX_COMMAND_SESSIONS = 64
KILL_GRACE_MS = 1000

T = TypeVar("T")


def new_process_id() -> str:
    return "proc-" + os.urandom(4).hex()


def exit_result(info: dict[str, Any]) -> ToolResult:
    """The reference's exit notes: none on 0, the code or the signal otherwise (failed)."""
    sig = info.get("signal")
    if sig:
        try:
            name = signal.Signals(int(sig)).name
        except ValueError:
            name = f"signal {sig}"
        if info.get("oom"):
            return ToolResult(
                note=f"[terminated by signal {name}: out of memory, the sandbox's memory limit "
                "was reached]",
                stop_reason="failed",
            )
        return ToolResult(note=f"[terminated by signal {name}]", stop_reason="failed")
    code = info.get("code")
    if code:
        return ToolResult(note=f"[exit code: {code}]", stop_reason="failed")
    return ToolResult()


@dataclass
class CommandSession:
    id: str
    cmd: str
    background: bool
    created: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    exit_info: dict[str, Any] | None = None
    # One poll at a time: the channel has a single event stream per process.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class CommandFinished:
    process_id: str
    command: str
    status: str
    exit_code: int
    detail: str
    output_tail: str
    tail_truncated: bool


class CommandSessions:
    def __init__(
        self,
        channel: RunnerChannel,
        on_finished: Callable[[CommandFinished], None] | None = None,
        limit: int = MAX_COMMAND_SESSIONS,
    ) -> None:
        self.channel = channel
        self.limit = limit
        self.sessions: dict[str, CommandSession] = {}
        self._on_finished = on_finished
        channel.add_exit_listener(self._on_exit)

    def __len__(self) -> int:
        return len(self.sessions)

    def running(self) -> bool:
        """Whether any command session is still running (as far as the daemon knows)."""
        return any(entry.exit_info is None for entry in self.sessions.values())

    def get(self, process_id: str) -> CommandSession | None:
        entry = self.sessions.get(process_id)
        if entry is not None:
            entry.last_used = time.monotonic()
        return entry

    async def add(self, process_id: str, cmd: str, background: bool) -> CommandSession:
        while len(self.sessions) >= self.limit:
            await self._evict_one()
        entry = CommandSession(process_id, cmd, background)
        self.sessions[process_id] = entry
        return entry

    def adopt(self, process_id: str, cmd: str, background: bool) -> None:
        """Re-register a command session found running in the runner (after a restart)."""
        self.sessions.setdefault(process_id, CommandSession(process_id, cmd, background))

    def remove(self, process_id: str) -> None:
        self.sessions.pop(process_id, None)

    async def _evict_one(self) -> None:
        exited = [s for s in self.sessions.values() if s.exit_info is not None]
        victim = min(exited or self.sessions.values(), key=lambda s: s.last_used)
        self.sessions.pop(victim.id, None)
        with contextlib.suppress(RunnerCallError, ChannelClosed):
            await self.channel.call("forget", id=victim.id)

    def note_exit(self, info: dict[str, Any]) -> None:
        """A command session exited (also: found exited after a daemon restart)."""
        self._on_exit(info)

    def _on_exit(self, info: dict[str, Any]) -> None:
        entry = self.sessions.get(str(info.get("id")))
        if entry is None or entry.exit_info is not None:
            # Seen already: a poll's attach delivers the exit once more, after the broadcast.
            return
        entry.exit_info = info
        if entry.background and self._on_finished is not None:
            result = exit_result(info)
            self._on_finished(
                CommandFinished(
                    process_id=entry.id,
                    command=entry.cmd,
                    status=result.stop_reason,
                    exit_code=int(info["code"]) if info.get("code") is not None else -1,
                    detail=(result.note or "").strip("[]").replace("exit code:", "exit code"),
                    output_tail=str(info.get("tail", "")),
                    tail_truncated=bool(info.get("tail_truncated")),
                )
            )

    async def kill(self, process_id: str) -> dict[str, Any]:
        """SIGTERM to the group, SIGKILL after the grace period."""
        return await self.channel.call("kill", id=process_id, grace_ms=KILL_GRACE_MS)


async def stream_until(
    stream: ProcStream,
    emit: Callable[[str], Any],
    deadline: float | None,
) -> dict[str, Any] | None:
    """Forward a process's output until it exits (its exit info) or ``deadline`` (None).

    Raises ChannelClosed when the runner goes away."""
    loop = asyncio.get_running_loop()
    while True:
        timeout = None if deadline is None else deadline - loop.time()
        if timeout is not None and timeout <= 0:
            return None
        event = await stream.next(timeout)
        if event is None:
            return None
        if event.kind == "out":
            await emit(event.text)
        elif event.kind == "exit":
            return event.info
        elif event.kind == "closed":
            raise ChannelClosed("the sandbox runner went away while the command ran")


async def flush_pending(stream: ProcStream, emit: Callable[[str], Any]) -> dict[str, Any] | None:
    """Forward what already arrived; the exit info if the process exit is among it."""
    exit_info = None
    for event in stream.pending():
        if event.kind == "out":
            await emit(event.text)
        elif event.kind == "exit":
            exit_info = event.info
    return exit_info


async def forward_while(
    stream: ProcStream, emit: Callable[[str], Any], request: Awaitable[T]
) -> tuple[asyncio.Future[T], dict[str, Any] | None]:
    """Await a runner request while forwarding the process's events, so that output produced
    meanwhile (e.g. during a kill's grace period) reaches the caller live rather than after the
    reply, and keeps the process's flow-control credit flowing. Returns the finished request
    (result or exception inside) and the exit info if the exit came too."""
    task = asyncio.ensure_future(request)
    exit_info = None
    try:
        while not task.done():
            getter = asyncio.ensure_future(stream.queue.get())
            try:
                await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                event = getter.result()
                if event.kind == "out":
                    await emit(event.text)
                elif event.kind == "exit":
                    exit_info = event.info
    except BaseException:
        task.cancel()
        raise
    return task, exit_info


async def detach(
    channel: RunnerChannel,
    stream: ProcStream,
    emit: Callable[[str], Any],
    process_id: str,
    **fields: Any,
) -> dict[str, Any] | None:
    """Stop the live delivery of a process's output (the runner keeps it again), forwarding what
    raced in; the exit info when the process exited, its output all delivered, meanwhile."""
    request, exit_info = await forward_while(
        stream, emit, channel.call("detach", id=process_id, **fields)
    )
    try:
        request.result()
    except RunnerCallError as exc:
        # Unknown to the runner: it exited and was delivered; that exit preceded this reply.
        if exc.code != "ESRCH":
            raise
    return await flush_pending(stream, emit) or exit_info
