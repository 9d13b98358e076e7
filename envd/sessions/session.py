"""One live session: its sandbox connection, tools, running calls, command sessions and events."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from engine import omni
from engine.omni import OmniMessage
from envd.backends.base import SandboxHandle, SandboxSpec
from envd.channel import RunnerChannel
from envd.commands import CommandFinished, CommandSessions
from envd.frame import BoundTool, execute_call
from envd.masking import SecretMasker
from envd.metrics import Metrics
from envd.sessions.model import SessionOptions, SessionStateName
from envd.tools import builtin_tools
from envd.tools.base import ToolContext

# Set last, so that nothing the caller puts in the vault or defaults can override them.
HARDENED_ENV = {
    "GIT_EDITOR": "true",
    "GIT_TERMINAL_PROMPT": "0",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
}
_WATCH_DEPTH = 256
log = logging.getLogger("envd.calls")


@dataclass
class SessionClosed:
    reason: str  # "closed", "idle_timeout", "broken", "shutdown"


SessionEvent = CommandFinished | SessionClosed


def bind_tools(options: SessionOptions) -> dict[str, BoundTool]:
    bound: dict[str, BoundTool] = {}
    for name, tool in builtin_tools().items():
        override = options.tools.get(name)
        if override is not None and override.disabled:
            continue
        timeout = tool.timeout_ms
        limit = tool.max_output_length
        if override is not None and override.timeout_ms is not None:
            timeout = override.timeout_ms
        if override is not None and override.max_output_length is not None:
            limit = override.max_output_length
        bound[name] = BoundTool(tool, timeout, limit)
    return bound


@dataclass
class Session:
    session_id: str
    tenant: str
    options: SessionOptions
    spec: SandboxSpec
    handle: SandboxHandle
    channel: RunnerChannel
    created_at: str
    state: SessionStateName = "running"
    detail: str = ""
    tools: dict[str, BoundTool] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    last_used_at: str = field(default_factory=omni.now)
    running: dict[str, asyncio.Event] = field(default_factory=dict)
    on_finished: Callable[[Session, CommandFinished], None] | None = None
    metrics: Metrics | None = None

    def __post_init__(self) -> None:
        self.tools = bind_tools(self.options)
        self.commands = CommandSessions(self.channel, self._finished)
        self._watchers: set[asyncio.Queue[SessionEvent]] = set()
        self._backlog: deque[CommandFinished] = deque(maxlen=_WATCH_DEPTH)

    # --- tools -----------------------------------------------------------------------------

    def command_env(self) -> dict[str, str]:
        return {**self.options.env_defaults, **self.options.vault, **HARDENED_ENV}

    def masker(self) -> SecretMasker | None:
        if not self.options.mask_secrets or not self.options.vault:
            return None
        return SecretMasker(self.options.vault.values())

    def touch(self) -> None:
        self.last_used = time.monotonic()
        self.last_used_at = omni.now()

    def _context(
        self, bound: BoundTool, tool_call_id: str, emit: Callable[[str], Any]
    ) -> ToolContext:
        return ToolContext(
            tool_name=bound.name,
            tool_call_id=tool_call_id,
            workspace=self.handle.workspace,
            scratchpad=self.handle.scratchpad.model_dir,
            timeout_ms=bound.timeout_ms,
            channel=self.channel,
            commands=self.commands,
            emit=emit,
            command_env=self.command_env(),
            network=self.options.network != "none",
            max_output_length=bound.max_output_length,
        )

    async def execute(
        self, call: omni.ToolCallPayload, signal: asyncio.Event | None = None
    ) -> AsyncIterator[OmniMessage]:
        """Run one call through the frame; ``cancel(tool_call_id)`` aborts it."""
        abort = asyncio.Event()
        call_id = call.tool_call_id
        self.running[call_id] = abort
        forward: asyncio.Task[None] | None = None
        if signal is not None:
            forward = asyncio.create_task(_forward(signal, abort))
        self.touch()
        started = time.monotonic()
        archived_before = self.handle.scratchpad.used_bytes
        outcome = "disconnected"  # unless the call reaches its complete output
        streamed = 0
        try:
            async for message in execute_call(call, self.tools, self._context,
                                              self.handle.scratchpad, abort, self.masker()):
                payload = message.payload
                if isinstance(payload, omni.PartialToolCallOutputPayload):
                    streamed += len(payload.output)
                elif isinstance(payload, omni.ToolCallOutputPayload):
                    outcome = payload.stop_reason or "completed"
                yield message
        finally:
            if forward is not None:
                forward.cancel()
            if self.running.get(call_id) is abort:
                del self.running[call_id]
            self.touch()
            self._record(call, outcome, time.monotonic() - started, streamed,
                         self.handle.scratchpad.used_bytes - archived_before)

    def _record(self, call: omni.ToolCallPayload, outcome: str, seconds: float, streamed: int,
                archived: int) -> None:
        tool = call.name if call.name in self.tools else "unknown"
        log.info("tool call %s %s", tool, outcome, extra={
            "session_id": self.session_id, "tool_call_id": call.tool_call_id, "tool": tool,
            "outcome": outcome, "duration_ms": round(seconds * 1000, 1)})
        if self.metrics is not None:
            self.metrics.tool_calls.labels(tool, outcome).inc()
            self.metrics.tool_duration.labels(tool).observe(seconds)
            self.metrics.streamed_chars.inc(streamed)
            if archived > 0:
                self.metrics.archived_bytes.inc(archived)

    def cancel(self, tool_call_id: str) -> bool:
        abort = self.running.get(tool_call_id)
        if abort is None:
            return False
        abort.set()
        return True

    # --- events ----------------------------------------------------------------------------

    def _finished(self, finished: CommandFinished) -> None:
        masker = self.masker()
        if masker is not None:
            finished.output_tail = masker.mask(finished.output_tail)
            finished.command = masker.mask(finished.command)
        self.publish(finished)
        if self.on_finished is not None:
            self.on_finished(self, finished)

    def publish(self, event: SessionEvent) -> None:
        if not self._watchers:
            # Nobody listens right now: keep completions for the next watcher.
            if isinstance(event, CommandFinished):
                self._backlog.append(event)
            return
        for queue in list(self._watchers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    async def watch(self) -> AsyncIterator[SessionEvent]:
        """Completions nobody has seen yet, then events as they happen, until the session
        closes."""
        queue: asyncio.Queue[SessionEvent] = asyncio.Queue(maxsize=_WATCH_DEPTH)
        while self._backlog:
            queue.put_nowait(self._backlog.popleft())
        self._watchers.add(queue)
        try:
            if self.state == "closed":
                yield SessionClosed("closed")
                return
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, SessionClosed):
                    return
        finally:
            self._watchers.discard(queue)


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
