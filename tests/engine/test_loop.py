"""The agent loop against an in-process fake Environment: the seed's turn, approval, outcome
and abort rules, without a sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engine import omni
from engine.interface import ApprovalDecision
from engine.llm import LLMOutcome, LLMStream
from engine.loop import DENIED_NOTE, AgentSession, RetryPolicy
from engine.models.scripted import ScriptedModel
from engine.omni import OmniMessage, SessionMetaPayload
from engine.trace import TraceWriter, load
from tests.engine.fakes import FakeEnvironment, check_stream, collect, of_type, output_texts

pytestmark = pytest.mark.anyio
FAST = RetryPolicy(max_retries=3, base_delay_s=0.01)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def allow(_: OmniMessage) -> ApprovalDecision:
    return "allow"


def meta() -> SessionMetaPayload:
    return SessionMetaPayload(session_id="s-1", provider="scripted", model_id="script",
                              model_context_window=0, system_prompt="", tools=[],
                              agent_state="", workspace="/workspace")


def kinds(messages: list[OmniMessage]) -> list[str]:
    return [str(getattr(m.payload, "type", m.type)) for m in messages
            if not omni.is_partial_payload(m)]


async def test_answer_without_tools_ends_the_task() -> None:
    model = ScriptedModel([{"thinking": "hmm", "text": "Hello there, nothing to do."}])
    session = AgentSession(model, FakeEnvironment())
    prompt = omni.user_text("hi")
    out = await collect(session.run([prompt]))
    check_stream(out)
    assert kinds(out) == ["request_begin", "thinking", "text", "token_usage", "request_end"]
    assert of_type(out, omni.RequestEndPayload)[0].status == "completed"
    streamed = "".join(p.text for p in of_type(out, omni.PartialTextPayload))
    assert streamed == "Hello there, nothing to do."
    assert model.requests == [[prompt]]  # the prompt is sent, not echoed on the stream
    assert session.carry_over == []


async def test_concurrent_calls_stream_interleaved_and_refeed_in_call_order() -> None:
    model = ScriptedModel([
        {"tool_calls": [call("echo", text="slow one", delay_s=0.6), call("echo", text="quick")]},
        {"text": "done"},
    ])
    env = FakeEnvironment()
    out = await collect(AgentSession(model, env).run([omni.user_text("go")], approve=allow))
    check_stream(out)
    completes = of_type(out, omni.ToolCallOutputPayload)
    assert [c.output for c in completes] == ["quick", "slow one"]  # completion order
    refed = model.requests[1]
    assert output_texts(refed) == ["slow one", "quick"]  # call order
    decisions = of_type(out, omni.ApprovalDecisionPayload)
    assert [d.decision for d in decisions] == ["allow", "allow"]
    # Both ran at once: the slow call's output was still streaming when the quick one ended.
    slow_id = decisions[0].tool_call_id
    first_slow_delta = next(
        i for i, m in enumerate(out)
        if isinstance(m.payload, omni.PartialToolCallOutputPayload)
        and m.payload.tool_call_id == slow_id and m.payload.event_type == "delta")
    quick_done = next(i for i, m in enumerate(out)
                      if isinstance(m.payload, omni.ToolCallOutputPayload))
    assert first_slow_delta < quick_done


async def test_no_approver_denies_everything_without_running_it() -> None:
    model = ScriptedModel([{"tool_calls": [call("echo", text="a"), call("echo", text="b")]},
                           {"text": "ok"}])
    env = FakeEnvironment()
    out = await collect(AgentSession(model, env).run([omni.user_text("go")]))
    check_stream(out)
    assert env.executed == []
    assert [d.decision for d in of_type(out, omni.ApprovalDecisionPayload)] == ["deny", "deny"]
    outputs = of_type(out, omni.ToolCallOutputPayload)
    assert [(o.output, o.stop_reason) for o in outputs] == [(DENIED_NOTE, "aborted")] * 2
    assert output_texts(model.requests[1]) == [DENIED_NOTE, DENIED_NOTE]


async def test_throwing_approver_denies_and_approvals_are_sequential() -> None:
    asked: list[str] = []

    async def approver(tool_call: OmniMessage) -> ApprovalDecision:
        args = json.loads(tool_call.payload.arguments)  # type: ignore[attr-defined]
        asked.append(args["text"])
        if args["text"] == "bad":
            raise ValueError("approver crashed")
        return "allow"

    model = ScriptedModel([{"tool_calls": [call("echo", text="bad"), call("echo", text="good")]},
                           {"text": "ok"}])
    env = FakeEnvironment()
    out = await collect(AgentSession(model, env).run([omni.user_text("go")], approve=approver))
    check_stream(out)
    assert asked == ["bad", "good"]
    assert [d.decision for d in of_type(out, omni.ApprovalDecisionPayload)] == ["deny", "allow"]
    assert output_texts(model.requests[1]) == [DENIED_NOTE, "good"]
    assert len(env.executed) == 1


async def test_environment_errors_become_failed_outputs() -> None:
    model = ScriptedModel([{"tool_calls": [call("raise"), call("mute")]}, {"text": "ok"}])
    out = await collect(AgentSession(model, FakeEnvironment()).run([omni.user_text("go")],
                                                                   approve=allow))
    check_stream(out)
    raised, mute = (m.payload for m in model.requests[1])
    assert raised.output == "half\n[tool error] RuntimeError: the tool blew up"  # type: ignore[attr-defined]
    assert raised.stop_reason == "failed"  # type: ignore[attr-defined]
    assert mute.output == ("[tool error] the environment ended the call without a complete "  # type: ignore[attr-defined]
                           "output")
    assert len(of_type(out, omni.ToolCallOutputPayload)) == 2


async def test_transient_model_failures_reconnect_with_the_same_input() -> None:
    model = ScriptedModel([{"error": "timeout", "message": "read timed out"},
                           {"error": "malformed", "message": "bad JSON"},
                           {"raise": "client bug"},
                           {"text": "finally"}])
    out = await collect(AgentSession(model, FakeEnvironment(), retry=FAST)
                        .run([omni.user_text("go")]))
    check_stream(out)
    ends = of_type(out, omni.RequestEndPayload)
    assert [(e.status, e.message) for e in ends] == [
        ("timeout", "read timed out"), ("malformed", "bad JSON"),
        ("failed", "RuntimeError: client bug"), ("completed", None)]
    assert len(model.requests) == 4 and all(r == model.requests[0] for r in model.requests)
    assert [m.payload.text for m in model.history] == ["go", "finally"]  # type: ignore[attr-defined]


async def test_retries_are_bounded_and_input_carries_over() -> None:
    model = ScriptedModel([{"error": "failed", "message": "HTTP 500"}] * 4 + [{"text": "back"}])
    session = AgentSession(model, FakeEnvironment(), retry=FAST)
    first = omni.user_text("one")
    out = await collect(session.run([first]))
    assert [e.status for e in of_type(out, omni.RequestEndPayload)] == ["failed"] * 4
    assert not of_type(out, omni.AbortPayload)
    assert session.carry_over == [first]
    second = omni.user_text("two")
    await collect(session.run([second]))
    assert model.requests[-1] == [first, second]


async def test_auth_stops_at_once() -> None:
    model = ScriptedModel([{"error": "auth", "message": "invalid API key"}, {"text": "never"}])
    out = await collect(AgentSession(model, FakeEnvironment(), retry=FAST)
                        .run([omni.user_text("go")]))
    assert [(e.status, e.message) for e in of_type(out, omni.RequestEndPayload)] == [
        ("auth", "invalid API key")]
    assert model.remaining == 1


async def test_abort_during_the_model_request() -> None:
    model = ScriptedModel([{"delay_s": 30, "text": "too late"}])
    signal = asyncio.Event()
    session = AgentSession(model, FakeEnvironment(), retry=FAST)
    out: list[OmniMessage] = []
    async for message in session.run([omni.user_text("go")], signal=signal):
        out.append(message)
        if isinstance(message.payload, omni.RequestBeginPayload):
            asyncio.get_running_loop().call_later(0.1, signal.set)
    assert kinds(out) == ["request_begin", "request_end", "abort"]
    assert of_type(out, omni.RequestEndPayload)[0].status == "aborted"
    assert len(session.carry_over) == 1


async def test_abort_closes_a_call_that_ignores_it() -> None:
    model = ScriptedModel([{"tool_calls": [call("echo", text="x" * 50, delay_s=5),
                                           call("stubborn"), call("echo", text="never")]}])
    signal = asyncio.Event()
    session = AgentSession(model, FakeEnvironment(), tool_abort_grace_s=0.3)
    out: list[OmniMessage] = []

    async def approver(tool_call: OmniMessage) -> ApprovalDecision:
        if tool_call.payload.name == "stubborn":  # type: ignore[attr-defined]
            asyncio.get_running_loop().call_later(0.2, signal.set)
            await asyncio.sleep(3600)  # a human who never answers: the abort must not wait
        return "allow"

    async for message in session.run([omni.user_text("go")], approve=approver, signal=signal):
        out.append(message)
    check_stream(out)
    outputs = {o.tool_call_id: o for o in of_type(out, omni.ToolCallOutputPayload)}
    assert len(outputs) == 3
    assert all(o.stop_reason == "aborted" for o in outputs.values())
    assert all(o.output.endswith("[interrupted: tool aborted by user]") for o in outputs.values())
    assert kinds(out)[-1] == "abort"
    assert [m.payload.tool_call_id for m in session.carry_over] == [  # type: ignore[attr-defined]
        c.tool_call_id for c in of_type(out, omni.ToolCallPayload)]


async def test_trace_replays_to_the_model_context(tmp_path: Path) -> None:
    model = ScriptedModel([
        {"error": "timeout"},
        {"thinking": "two things", "text": "Running both.",
         "tool_calls": [call("echo", text="first", delay_s=0.3), call("echo", text="second")]},
        {"text": "All done."},
    ])
    path = tmp_path / "trace.jsonl"
    prompt = omni.user_text("go")
    with TraceWriter(path, meta()) as trace:
        out = await collect(AgentSession(model, FakeEnvironment(), trace, retry=FAST)
                            .run([prompt], approve=allow))
    loaded = load(path)
    assert loaded.meta.session_id == "s-1"
    # The trace is the stream without partials, after the prompt.
    assert [omni.to_dict(m) for m in loaded.messages] == [
        omni.to_dict(m) for m in [prompt, *out] if not omni.is_partial_payload(m)]
    # The failed first request's messages are not part of the context; outputs are in call order.
    assert [omni.to_dict(m) for m in loaded.context()] == [omni.to_dict(m) for m in model.history]

    # Resuming: the next model gets the replayed history; new lines go to the same trace.
    resumed_model = ScriptedModel([{"text": "Still here."}])
    async with AgentSession.resume(resumed_model, FakeEnvironment(), path) as again:
        assert [omni.to_dict(m) for m in resumed_model.history] == [
            omni.to_dict(m) for m in model.history]
        await collect(again.run([omni.user_text("and now?")]))
    assert [omni.to_dict(m) for m in load(path).context()] == [
        omni.to_dict(m) for m in resumed_model.history]


class UnrulyModel:
    """Breaks the LLM contract: streams text forever ignoring the abort signal, or ends
    without an outcome."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0

    def set_history(self, messages: Sequence[OmniMessage]) -> None:
        pass

    def stream_generate(self, new_messages: Sequence[OmniMessage],
                        signal: asyncio.Event | None = None,
                        thinking_level: str | None = None) -> LLMStream:
        self.requests += 1
        return LLMStream(self._generate())

    async def _generate(self) -> AsyncIterator[OmniMessage | LLMOutcome]:
        yield omni.partial_text("start")
        yield omni.partial_text("delta", "partial answer")
        if self.mode == "no-outcome":
            return
        while True:
            await asyncio.sleep(0.05)
            yield omni.partial_text("delta", ".")


async def test_a_model_that_ignores_the_abort_is_stopped() -> None:
    signal = asyncio.Event()
    session = AgentSession(UnrulyModel("stubborn"), FakeEnvironment(), model_abort_grace_s=0.2)
    out: list[OmniMessage] = []
    async for message in session.run([omni.user_text("go")], signal=signal):
        out.append(message)
        if len(out) == 3:
            signal.set()
    check_stream(out)  # the engine closed the open text segment itself
    texts = of_type(out, omni.TextPayload)
    assert texts[0].text.startswith("partial answer") and texts[0].stop_reason == "aborted"
    assert kinds(out)[-3:] == ["text", "request_end", "abort"]


async def test_a_model_stream_without_outcome_is_malformed_and_retried() -> None:
    model = UnrulyModel("no-outcome")
    out = await collect(AgentSession(model, FakeEnvironment(), retry=FAST)
                        .run([omni.user_text("go")]))
    check_stream(out)
    ends = of_type(out, omni.RequestEndPayload)
    assert [e.status for e in ends] == ["malformed"] * 4 and model.requests == 4


async def test_a_consumer_that_stops_reading_stops_the_tools() -> None:
    model = ScriptedModel([{"tool_calls": [call("echo", text="hi"), call("stubborn")]},
                           {"text": "after"}])
    env = FakeEnvironment()
    session = AgentSession(model, env)
    run = session.run([omni.user_text("go")], approve=allow)
    done = started = False
    async for message in run:
        payload = message.payload
        done = done or isinstance(payload, omni.ToolCallOutputPayload)
        started = started or (isinstance(payload, omni.PartialToolCallOutputPayload)
                              and payload.tool_call_id.endswith("_2"))
        if done and started:
            break  # the "hi" call is done; the stubborn one still runs
    await run.aclose()
    assert len(env.cancelled) == 1  # closed at once, not left to the garbage collector
    carried = session.carry_over
    assert output_texts(carried) == ["hi", "[interrupted: tool aborted by user]"]
    await collect(session.run([omni.user_text("next")]))
    assert model.requests[1][:2] == carried
