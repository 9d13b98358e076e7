"""The context engine's agent loop: drive a model and an Environment until the task is done.

``AgentSession.run(new_messages, approve, signal)`` streams OmniMessages. Per turn::

    request_begin → the model's partial_* and complete messages (token_usage last)
    → request_end(status[, message])
    → for each tool_call, in call order: approval_decision, then its output frames
      (approved calls run concurrently; their frames interleave, routed by tool_call_id)

and the outputs, put back in call order, are the next request's input. The run ends when the
model answers without tool calls. Design points where the seeds leave room:

- Tool calls are approved and started once the model request has *completed* (not while it
  still streams): a request that fails and is retried then never leaves tools behind it that ran
  for calls the model's history does not contain.
- ``timeout``, ``malformed`` and ``failed`` are retried within the run (:class:`RetryPolicy`);
  ``aborted`` and ``auth`` stop at once. Whatever input was not committed (the prompt, tool
  outputs) is carried over to the next ``run``.
- On an abort the running calls get ``tool_abort_grace_s`` to end with their own ``aborted``
  output (the Environment cancels them); calls still open then are closed by the engine. Every
  tool call gets exactly one complete ``tool_call_output`` on the stream; ``abort`` is last.
- The prompt is written to the trace but not echoed on the stream (the caller has it);
  background completion reports are both, as they are news to the caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from engine import omni
from engine.background import CommandCompletion, report_message
from engine.interface import ApprovalDecision, ApproveFn, EnvironmentInterface, ToolExecutionRequest
from engine.llm import LLMInterface, LLMOutcome, LLMStream, ThinkingLevel
from engine.omni import OmniMessage, StopReason
from engine.trace import INTERRUPTED_NOTE, TraceWriter, load

log = logging.getLogger(__name__)

DENIED_NOTE = "Tool call denied by user."


@dataclass(frozen=True)
class RetryPolicy:
    """Reconnects of a failed model request within one run: ``max_retries`` more attempts,
    waiting ``base_delay_s`` doubled per attempt, at most ``max_delay_s``."""

    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1-based)."""
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))


@runtime_checkable
class BackgroundSource(Protocol):
    """An Environment that reports finished background commands (RemoteEnvironment does)."""

    def background_completions(self) -> AsyncIterator[CommandCompletion]: ...


@dataclass
class _Turn:
    outcome: LLMOutcome = field(default_factory=lambda: LLMOutcome("failed", "no request"))
    tool_calls: list[OmniMessage] = field(default_factory=list)


@dataclass
class _CallDone:
    tool_call_id: str


class _GaveUp(Exception):
    """The model did not stop within the grace period after an abort."""


class AgentSession:
    """One conversation: a model, an Environment and optionally a trace.

    The session does not own ``environment`` (dispose it yourself) nor a ``trace`` it was given.
    :meth:`aclose` stops the background-completion watcher (and closes a trace it opened): call
    it (or use ``async with``) *before* disposing the environment, since the watcher holds a
    streaming call on it."""

    def __init__(
        self,
        llm: LLMInterface,
        environment: EnvironmentInterface,
        trace: TraceWriter | None = None,
        *,
        retry: RetryPolicy | None = None,
        model_abort_grace_s: float = 2.0,
        tool_abort_grace_s: float = 10.0,
        background: bool = True,
    ) -> None:
        self.llm = llm
        self.environment = environment
        self.trace = trace
        self.retry = retry or RetryPolicy()
        self.model_abort_grace_s = model_abort_grace_s
        # Longer than RemoteEnvironment's own grace after CancelTool, so that it can close
        # its calls with what the daemon said.
        self.tool_abort_grace_s = tool_abort_grace_s
        self.background = background
        self._carry: list[OmniMessage] = []
        self._reports: deque[OmniMessage] = deque()
        self._watcher: asyncio.Task[None] | None = None
        self._running = False
        self._owns_trace = False
        self._trace_failed = False

    @classmethod
    def resume(
        cls,
        llm: LLMInterface,
        environment: EnvironmentInterface,
        trace_path: str | Path,
        **options: Any,
    ) -> AgentSession:
        """Continue a traced session: the model gets the replayed context as its history and
        new messages are appended to the same trace."""
        llm.set_history(load(trace_path).context())
        session = cls(llm, environment, TraceWriter(trace_path), **options)
        session._owns_trace = True
        return session

    @property
    def carry_over(self) -> list[OmniMessage]:
        """Input not yet committed to the model (after an abort or a failed request); it is
        sent first on the next run."""
        return list(self._carry)

    async def aclose(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self._owns_trace and self.trace is not None:
            self.trace.close()

    async def __aenter__(self) -> AgentSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the loop ------------------------------------------------------------------------------

    async def run(
        self,
        new_messages: Sequence[OmniMessage],
        approve: ApproveFn | None = None,
        signal: asyncio.Event | None = None,
        thinking_level: ThinkingLevel | None = None,
    ) -> AsyncGenerator[OmniMessage, None]:
        """Run one task to its end. ``approve`` is asked once per tool call (none: deny all);
        setting ``signal`` interrupts. Raises only RuntimeError for a second concurrent run."""
        if self._running:
            raise RuntimeError("AgentSession.run: a run is already in progress")
        self._running = True
        self._start_watcher()
        pending = [*self._carry, *new_messages]
        self._carry = []
        calls: list[OmniMessage] = []
        outputs: dict[str, OmniMessage] = {}
        finished = False
        try:
            for message in new_messages:
                self._record(message)
            while True:
                while self._reports:
                    report = self._reports.popleft()
                    pending.append(report)
                    yield self._record(report)
                turn = _Turn()
                # aclosing: a consumer that stops reading closes the inner steps at once
                # (the model stream, the running tools), not whenever the GC gets to them.
                async with contextlib.aclosing(self._request_with_retries(
                        pending, signal, thinking_level, turn)) as request:
                    async for message in request:
                        yield message
                if turn.outcome.status != "completed":
                    if turn.outcome.status == "aborted":
                        yield self._record(omni.abort())
                    break
                pending = []
                if not turn.tool_calls:
                    break
                calls, outputs = turn.tool_calls, {}
                async with contextlib.aclosing(
                        self._run_batch(calls, approve, signal, outputs)) as batch:
                    async for message in batch:
                        yield message
                pending, calls = _in_call_order(calls, outputs), []
                if _is_set(signal):
                    yield self._record(omni.abort())
                    break
            finished = True
        finally:
            if calls:  # closed by the consumer mid-batch
                pending = _in_call_order(calls, outputs)
            if not finished or pending:
                self._carry = pending
            self._running = False

    async def _request_with_retries(
        self,
        inputs: list[OmniMessage],
        signal: asyncio.Event | None,
        thinking_level: ThinkingLevel | None,
        turn: _Turn,
    ) -> AsyncGenerator[OmniMessage, None]:
        attempt = 0
        while True:
            if _is_set(signal):
                turn.outcome = LLMOutcome("aborted")
                return
            attempt += 1
            async with contextlib.aclosing(
                    self._request(inputs, signal, thinking_level, turn)) as request:
                async for message in request:
                    yield message
            status = turn.outcome.status
            if status in ("completed", "aborted", "auth"):
                return
            if _is_set(signal):
                turn.outcome = LLMOutcome("aborted")
                return
            if attempt > self.retry.max_retries:
                return
            if await _sleep_unless(signal, self.retry.delay(attempt)):
                turn.outcome = LLMOutcome("aborted")
                return

    async def _request(
        self,
        inputs: list[OmniMessage],
        signal: asyncio.Event | None,
        thinking_level: ThinkingLevel | None,
        turn: _Turn,
    ) -> AsyncGenerator[OmniMessage, None]:
        turn.tool_calls = []
        yield self._record(omni.request_begin())
        segments = _OpenSegments()
        stream: LLMStream | None = None
        deadline: list[float] = []  # set once the abort is seen
        outcome: LLMOutcome
        try:
            stream = self.llm.stream_generate(list(inputs), signal=signal,
                                              thinking_level=thinking_level)
            while True:
                message = await self._next_model_message(stream, signal, deadline)
                if message is None:
                    break
                segments.see(message)
                if isinstance(message.payload, omni.ToolCallPayload) and not message.origin:
                    turn.tool_calls.append(message)
                yield self._record(message)
            outcome = stream.outcome
        except _GaveUp:
            outcome = LLMOutcome("aborted")
        except Exception as exc:  # a model implementation that broke the never-throw rule
            outcome = LLMOutcome("failed", f"{type(exc).__name__}: {exc}")
        finally:
            if stream is not None and not stream.done:
                await stream.aclose()
        if outcome.status != "completed":
            for message in segments.close(outcome.status):
                yield self._record(message)
        turn.outcome = outcome
        detail = outcome.message if outcome.status != "completed" else None
        yield self._record(omni.request_end(outcome.status, detail))

    async def _next_model_message(
        self, stream: LLMStream, signal: asyncio.Event | None, deadline: list[float]
    ) -> OmniMessage | None:
        """The next message, or None at the end. Once ``signal`` is set the model has
        ``model_abort_grace_s`` to finish on its own; then :class:`_GaveUp`."""
        loop = asyncio.get_running_loop()
        step = asyncio.ensure_future(stream.__anext__())
        try:
            if signal is not None and not deadline:
                waiter = asyncio.ensure_future(signal.wait())
                try:
                    await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if not step.done():
                    deadline.append(loop.time() + self.model_abort_grace_s)
            if deadline and not step.done():
                await asyncio.wait({step}, timeout=max(0.0, deadline[0] - loop.time()))
                if not step.done():
                    raise _GaveUp
            return await step
        except StopAsyncIteration:
            return None
        finally:
            if not step.done():
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step

    # --- tool calls ----------------------------------------------------------------------------

    async def _run_batch(
        self,
        calls: list[OmniMessage],
        approve: ApproveFn | None,
        signal: asyncio.Event | None,
        outputs: dict[str, OmniMessage],
    ) -> AsyncGenerator[OmniMessage, None]:
        queue: asyncio.Queue[OmniMessage | _CallDone] = asyncio.Queue()
        guards: dict[str, _CallGuard] = {}
        tasks: dict[str, asyncio.Task[None]] = {}
        # One signal for every call of the turn; set by the caller's signal, or by us when the
        # consumer walks away mid-batch.
        turn_signal = asyncio.Event()
        forward = asyncio.ensure_future(_forward(signal, turn_signal)) if signal else None

        def deliver(message: OmniMessage) -> OmniMessage:
            payload = message.payload
            if isinstance(payload, omni.ToolCallOutputPayload) and not message.origin:
                outputs[payload.tool_call_id] = message
            return self._record(message)

        try:
            for call in calls:
                call_id = _call_id(call)
                decision: ApprovalDecision | None = None
                if not _is_set(signal):
                    decision = await self._approve(approve, call, signal)
                if decision is None:  # interrupted before it could run
                    for message in _synthetic_output(call_id, INTERRUPTED_NOTE):
                        yield deliver(message)
                    continue
                yield deliver(omni.approval_decision(call_id, decision))
                if decision == "deny":
                    for message in _synthetic_output(call_id, DENIED_NOTE):
                        yield deliver(message)
                    continue
                guards[call_id] = _CallGuard(call_id)
                tasks[call_id] = asyncio.create_task(
                    self._execute(call, guards[call_id], turn_signal, approve, queue))

            loop = asyncio.get_running_loop()
            remaining = set(tasks)
            deadline: float | None = None
            while remaining:
                if deadline is None and _is_set(signal):
                    deadline = loop.time() + self.tool_abort_grace_s
                if deadline is not None and loop.time() >= deadline:
                    break
                item = await _get(queue, None if deadline is not None else signal,
                                  None if deadline is None else deadline - loop.time())
                if item is None:
                    continue
                if isinstance(item, _CallDone):
                    remaining.discard(item.tool_call_id)
                else:
                    yield deliver(item)
            # Calls that did not end within the grace: stop them and close them ourselves.
            for call_id in remaining:
                tasks[call_id].cancel()
            await asyncio.gather(*(tasks[c] for c in remaining), return_exceptions=True)
            while not queue.empty():
                item = queue.get_nowait()
                if not isinstance(item, _CallDone):
                    yield deliver(item)
            for call_id in sorted(remaining):
                for message in guards[call_id].close(INTERRUPTED_NOTE, "aborted"):
                    yield deliver(message)
        finally:
            if forward is not None:
                forward.cancel()
            running = [t for t in tasks.values() if not t.done()]
            if running:
                turn_signal.set()
                for task in running:
                    task.cancel()
                await asyncio.gather(*running, return_exceptions=True)

    async def _approve(
        self, approve: ApproveFn | None, call: OmniMessage, signal: asyncio.Event | None
    ) -> ApprovalDecision | None:
        """The decision for one call (a missing or throwing approver denies), or None when the
        run was interrupted while waiting for it."""
        if approve is None:
            return "deny"

        async def ask() -> object:
            return await approve(call)

        asking = asyncio.ensure_future(ask())
        waiter = asyncio.ensure_future(signal.wait()) if signal is not None else None
        try:
            await asyncio.wait({asking} if waiter is None else {asking, waiter},
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if waiter is not None:
                waiter.cancel()
        if not asking.done():
            asking.cancel()
            with contextlib.suppress(BaseException):
                await asking
            return None
        try:
            decision = asking.result()
        except Exception as exc:
            log.warning("approval callback failed for %s (denied): %s", _call_id(call), exc)
            return "deny"
        return "allow" if decision == "allow" else "deny"

    async def _execute(
        self,
        call: OmniMessage,
        guard: _CallGuard,
        signal: asyncio.Event,
        approve: ApproveFn | None,
        queue: asyncio.Queue[OmniMessage | _CallDone],
    ) -> None:
        failure = "the environment ended the call without a complete output"
        try:
            stream = self.environment.execute_tool(
                ToolExecutionRequest(tool_call=call, signal=signal, approve=approve))
            try:
                async for message in stream:
                    for accepted in guard.accept(message):
                        queue.put_nowait(accepted)
                    if guard.complete:
                        break
            finally:
                closer = getattr(stream, "aclose", None)
                if closer is not None:
                    await closer()
        except Exception as exc:  # an Environment that broke the never-throw rule
            failure = f"{type(exc).__name__}: {exc}"
        if not guard.complete:
            if signal.is_set():
                closing = guard.close(INTERRUPTED_NOTE, "aborted")
            else:
                closing = guard.close(f"[tool error] {failure}", "failed")
            for message in closing:
                queue.put_nowait(message)
        queue.put_nowait(_CallDone(guard.call_id))

    # --- background completions and the trace --------------------------------------------------

    def _start_watcher(self) -> None:
        if self._watcher is None and self.background and isinstance(self.environment,
                                                                     BackgroundSource):
            self._watcher = asyncio.create_task(self._watch(self.environment))

    async def _watch(self, source: BackgroundSource) -> None:
        """Queue a report per finished background command, for the next model request. The
        watch is re-established (with backoff) when the daemon goes away."""
        delay = 0.5
        while True:
            try:
                async for done in source.background_completions():
                    self._reports.append(report_message(done))
                    delay = 0.5
                return  # the session closed
            except Exception as exc:
                # A transport error (it carries a status code, like grpc's) is worth retrying;
                # anything else, such as a call on an environment already disposed, ends it.
                if not callable(getattr(exc, "code", None)):
                    log.debug("background watch ended: %s", exc)
                    return
                log.debug("background watch interrupted (%s); retrying in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def _record(self, message: OmniMessage) -> OmniMessage:
        if self.trace is not None:
            try:
                self.trace.write(message)
            except (OSError, ValueError) as exc:
                # A failing trace must not kill the agent; say so once.
                if not self._trace_failed:
                    log.error("cannot write the trace %s: %s", self.trace.path, exc)
                self._trace_failed = True
        return message


# --- helpers -------------------------------------------------------------------------------------


class _CallGuard:
    """One call's frame as it streams, so that whatever the Environment does, the call ends
    with exactly one complete output whose text equals its deltas."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.started = False
        self.stopped = False
        self.complete = False
        self.text: list[str] = []

    def accept(self, message: OmniMessage) -> list[OmniMessage]:
        payload = message.payload
        if message.origin:
            return [message]  # a child session's message: passes through untouched
        if isinstance(payload, omni.PartialToolCallOutputPayload):
            if payload.tool_call_id != self.call_id or self.stopped or self.complete:
                return []
            out = self._start() if payload.event_type != "start" else []
            self.started = True
            if payload.event_type == "delta":
                self.text.append(payload.output)
            elif payload.event_type == "stop":
                self.stopped = True
            return [*out, message]
        if isinstance(payload, omni.ToolCallOutputPayload):
            if payload.tool_call_id != self.call_id or self.complete:
                return []
            out = self._start()
            if not self.stopped:
                if not self.text and payload.output:
                    out.append(omni.partial_tool_call_output(self.call_id, "delta",
                                                             payload.output))
                out.append(omni.partial_tool_call_output(
                    self.call_id, "stop", stop_reason=payload.stop_reason or "completed"))
                self.stopped = True
            self.complete = True
            return [*out, message]
        return [message]

    def close(self, note: str, reason: StopReason) -> list[OmniMessage]:
        """The messages that end the call when the Environment did not."""
        out = self._start()
        so_far = "".join(self.text)
        if self.stopped:
            output = so_far or note  # the stop went out already; keep deltas == output if we can
        else:
            tail = ("\n" if so_far else "") + note
            out.append(omni.partial_tool_call_output(self.call_id, "delta", tail))
            out.append(omni.partial_tool_call_output(self.call_id, "stop", stop_reason=reason))
            output = so_far + tail
        self.stopped = self.complete = True
        out.append(omni.tool_call_output(self.call_id, output, reason))
        return out

    def _start(self) -> list[OmniMessage]:
        if self.started:
            return []
        self.started = True
        return [omni.partial_tool_call_output(self.call_id, "start")]


class _OpenSegments:
    """The model's partial segments still open, to close them if a request ends abnormally
    without the model doing so (the streaming discipline holds whatever the model does)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], tuple[str, list[str]]] = {}

    def see(self, message: OmniMessage) -> None:
        payload = message.payload
        if message.origin:
            return
        if isinstance(payload, omni.PartialTextPayload):
            key, name, text = ("text", ""), "", payload.text
        elif isinstance(payload, omni.PartialThinkingPayload):
            key, name, text = ("thinking", ""), "", payload.thinking
        elif isinstance(payload, omni.PartialToolCallPayload):
            key, name, text = ("tool", payload.tool_call_id), payload.name, payload.arguments
        else:
            return
        if payload.event_type == "start":
            self._open[key] = (name, [text])
        elif payload.event_type == "delta" and key in self._open:
            self._open[key][1].append(text)
        elif payload.event_type == "stop":
            self._open.pop(key, None)

    def close(self, reason: StopReason) -> list[OmniMessage]:
        out: list[OmniMessage] = []
        for (kind, call_id), (name, parts) in self._open.items():
            text = "".join(parts)
            if kind == "text":
                out.append(omni.partial_text("stop", stop_reason=reason))
                complete = omni.assistant_text(text)
            elif kind == "thinking":
                out.append(omni.partial_thinking("stop", stop_reason=reason))
                complete = omni.thinking(text)
            else:
                out.append(omni.partial_tool_call("stop", name, "", call_id, reason))
                complete = omni.tool_call(name, text, call_id)
            complete.payload.stop_reason = reason  # type: ignore[attr-defined]
            out.append(complete)
        self._open.clear()
        return out


def _call_id(call: OmniMessage) -> str:
    return str(getattr(call.payload, "tool_call_id", ""))


def _synthetic_output(call_id: str, note: str) -> list[OmniMessage]:
    """An ``aborted`` output for a call that never reached the Environment, framed like one
    that did."""
    return [
        omni.partial_tool_call_output(call_id, "start"),
        omni.partial_tool_call_output(call_id, "delta", note),
        omni.partial_tool_call_output(call_id, "stop", stop_reason="aborted"),
        omni.tool_call_output(call_id, note, "aborted"),
    ]


def _in_call_order(calls: list[OmniMessage], outputs: dict[str, OmniMessage]) -> list[OmniMessage]:
    """The batch's outputs as the model gets them: in call order, a placeholder for a call
    whose output never came (the consumer stopped reading mid-batch)."""
    ordered = []
    for call in calls:
        call_id = _call_id(call)
        ordered.append(outputs.get(call_id)
                       or omni.tool_call_output(call_id, INTERRUPTED_NOTE, "aborted"))
    return ordered


def _is_set(signal: asyncio.Event | None) -> bool:
    return signal is not None and signal.is_set()


async def _forward(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _sleep_unless(signal: asyncio.Event | None, seconds: float) -> bool:
    """Sleep; True when ``signal`` was set meanwhile."""
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(signal.wait(), seconds)
    return signal.is_set()


async def _get(
    queue: asyncio.Queue[OmniMessage | _CallDone],
    signal: asyncio.Event | None,
    wait_s: float | None,
) -> OmniMessage | _CallDone | None:
    """The next item; None when ``signal`` fired or ``wait_s`` passed first."""
    if not queue.empty():
        return queue.get_nowait()
    getter = asyncio.ensure_future(queue.get())
    waits: set[asyncio.Future[Any]] = {getter}
    waiter = asyncio.ensure_future(signal.wait()) if signal is not None else None
    if waiter is not None:
        waits.add(waiter)
    try:
        await asyncio.wait(waits, timeout=None if wait_s is None else max(0.0, wait_s),
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        if waiter is not None:
            waiter.cancel()
    if getter.done():
        return getter.result()
    getter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await getter
    # A get that completed while being cancelled would lose an item: put it back.
    if getter.done() and not getter.cancelled():
        return getter.result()
    return None
