"""Trace files: what is written, and how replay rebuilds the model context."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import omni
from engine.omni import OmniMessage, SessionMetaPayload
from engine.trace import INTERRUPTED_NOTE, TraceError, TraceWriter, load, replay


def meta() -> SessionMetaPayload:
    return SessionMetaPayload(session_id="s-1", provider="p", model_id="m",
                              model_context_window=128000, system_prompt="sys", tools=[],
                              agent_state="/agent", workspace="/workspace")


def dicts(messages: list[OmniMessage]) -> list[dict[str, object]]:
    return [omni.to_dict(m) for m in messages]


def test_only_complete_main_session_messages_are_written(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    prompt = omni.user_text("hi")
    child = omni.with_origin(omni.assistant_text("from a subagent"), "s-child")
    with TraceWriter(path, meta()) as trace:
        for message in [prompt, omni.request_begin(), omni.partial_text("start"),
                        omni.partial_text("delta", "yo"), omni.partial_text("stop"),
                        child, omni.assistant_text("yo"), omni.request_end("completed")]:
            trace.write(message)
    lines = path.read_text().splitlines()
    assert omni.parse(lines[0]).type == "session_meta"
    loaded = load(path)
    assert loaded.meta == meta()
    kinds = [getattr(m.payload, "type", None) for m in loaded.messages]
    assert kinds == ["text", "request_begin", "text", "request_end"]
    with pytest.raises(FileExistsError):
        TraceWriter(path, meta())  # a new trace never overwrites an old one


def test_replay_commits_completed_requests_and_orders_outputs_by_call() -> None:
    prompt = omni.user_text("go")
    lost = omni.assistant_text("half an answer")
    a = omni.tool_call("exec_command", "{}", "a")
    b = omni.tool_call("exec_command", "{}", "b")
    out_a, out_b = omni.tool_call_output("a", "A"), omni.tool_call_output("b", "B")
    answer = omni.assistant_text("done")
    messages = [
        prompt,
        omni.request_begin(), lost, omni.request_end("timeout", "read timed out"),
        omni.request_begin(), a, b, omni.request_end("completed"),
        omni.approval_decision("a", "allow"), omni.approval_decision("b", "allow"),
        out_b, out_a,  # completion order
        omni.request_begin(), answer, omni.request_end("completed"),
    ]
    assert dicts(replay(messages)) == dicts([prompt, a, b, out_a, out_b, answer])


def test_replay_repairs_calls_left_without_output() -> None:
    a = omni.tool_call("exec_command", "{}", "a")
    b = omni.tool_call("exec_command", "{}", "b")
    out_b = omni.tool_call_output("b", "B")
    messages = [omni.user_text("go"), omni.request_begin(), a, b, omni.request_end("completed"),
                out_b]  # the process died while "a" ran
    context = replay(messages)
    assert [getattr(m.payload, "tool_call_id", None) for m in context] == [None, "a", "b", "a", "b"]
    repaired = context[3].payload
    assert isinstance(repaired, omni.ToolCallOutputPayload)
    assert (repaired.output, repaired.stop_reason) == (INTERRUPTED_NOTE, "aborted")
    assert dicts(replay(messages, repair=False)) == dicts([*messages[:1], a, b, out_b])


def test_a_torn_last_line_is_ignored_and_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, meta()) as trace:
        trace.write(omni.user_text("kept"))
    with path.open("a") as f:
        f.write('{"timestamp": "2026-01-01T00:00:00Z", "type": "model_')  # crash mid-write
    assert len(load(path).messages) == 1
    with TraceWriter(path) as again:  # resuming drops the torn line and appends
        again.write(omni.user_text("more"))
    assert [m.payload.text for m in load(path).messages] == ["kept", "more"]  # type: ignore[attr-defined]
    (tmp_path / "bad.jsonl").write_text('{"not": "a trace"}\n{}\n')
    with pytest.raises(TraceError):
        load(tmp_path / "bad.jsonl")
