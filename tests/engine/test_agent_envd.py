"""The agent loop driving a real envd daemon: a scripted coding task, and the ways a turn can end
(denial, a throwing approver, a tool timeout, an interrupt, the daemon vanishing), plus
background completions reaching the model."""

from __future__ import annotations

import asyncio
import shutil
import signal as signals
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import omni
from engine.client import EnvdClient
from engine.interface import ApprovalDecision, ApproveFn
from engine.loop import DENIED_NOTE, AgentSession, RetryPolicy
from engine.models.scripted import ScriptedModel
from engine.omni import OmniMessage, SessionMetaPayload
from engine.remote import RemoteEnvironment
from engine.trace import TraceWriter, load
from envd.v1 import environment_pb2 as pb
from tests.conftest import IMAGE
from tests.daemon import DaemonProcess
from tests.engine.fakes import check_stream, of_type
from tests.helpers import call_tool

pytestmark = [pytest.mark.anyio, pytest.mark.docker]
FAST = RetryPolicy(max_retries=2, base_delay_s=0.05)
INTERRUPTED = "[interrupted: tool aborted by user]"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


async def allow(_: OmniMessage) -> ApprovalDecision:
    return "allow"


async def run_task(model: ScriptedModel, env: RemoteEnvironment,
                   approve: ApproveFn | None = None) -> list[OmniMessage]:
    # The session is closed at the end: its background watcher must not outlive the test.
    async with AgentSession(model, env) as session:
        return [m async for m in session.run([omni.user_text("go")], approve=approve)]


def outputs(messages: list[OmniMessage]) -> list[omni.ToolCallOutputPayload]:
    return of_type(messages, omni.ToolCallOutputPayload)


def assert_one_output_per_call(messages: list[OmniMessage]) -> None:
    check_stream(messages)
    calls = [c.tool_call_id for c in of_type(messages, omni.ToolCallPayload)]
    assert sorted(o.tool_call_id for o in outputs(messages)) == sorted(calls)


CALC_BUGGY = "def add(a, b):\n    return a - b\n"
CALC_TEST = ("import unittest\n\nfrom calc import add\n\n\n"
             "class AddTest(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
             "if __name__ == '__main__':\n    unittest.main()\n")


async def test_scripted_agent_fixes_a_failing_test(remote_env: RemoteEnvironment,
                                                   tmp_path: Path) -> None:
    model = ScriptedModel([
        {"thinking": "Write the module and its test first.", "text": "Creating the files.",
         "tool_calls": [call("write_file", file_path="calc.py", content=CALC_BUGGY),
                        call("write_file", file_path="test_calc.py", content=CALC_TEST)]},
        {"tool_calls": [call("exec_command", cmd="python3 -m unittest -v 2>&1")]},
        {"thinking": "add subtracts; fix it.",
         "tool_calls": [call("edit_file", file_path="calc.py", old_string="return a - b",
                             new_string="return a + b")]},
        {"tool_calls": [call("exec_command", cmd="python3 -m unittest -v 2>&1")]},
        {"text": "The test passes now."},
    ])
    meta = SessionMetaPayload(session_id=remote_env.session_id, provider="scripted",
                              model_id="script", model_context_window=0, system_prompt="",
                              tools=await remote_env.list_tools(), agent_state="",
                              workspace="/workspace")
    path = tmp_path / "trace.jsonl"
    prompt = omni.user_text("Write calc.add with a unit test and make it pass.")
    with TraceWriter(path, meta) as trace:
        session = AgentSession(model, remote_env, trace)
        out = [m async for m in session.run([prompt], approve=allow)]
        await session.aclose()
    assert_one_output_per_call(out)
    assert [e.status for e in of_type(out, omni.RequestEndPayload)] == ["completed"] * 5

    created = model.requests[1]
    assert [m.payload.output.split(" (")[0] for m in created] == [  # type: ignore[attr-defined]
        'Created "/workspace/calc.py"', 'Created "/workspace/test_calc.py"']
    (failing,) = (m.payload for m in model.requests[2])
    assert isinstance(failing, omni.ToolCallOutputPayload)
    assert failing.stop_reason == "failed"
    assert "AssertionError: -1 != 5" in failing.output and "FAILED (failures=1)" in failing.output
    assert failing.output.endswith("[exit code: 1]")
    (edited,) = (m.payload for m in model.requests[3])
    assert edited.output.startswith('Replaced 1 occurrence(s) in "/workspace/calc.py".')  # type: ignore[attr-defined]
    assert "+    return a + b" in edited.output  # type: ignore[attr-defined]
    (passing,) = (m.payload for m in model.requests[4])
    assert isinstance(passing, omni.ToolCallOutputPayload)
    assert passing.stop_reason == "completed" and passing.output.rstrip().endswith("OK")

    # The files really are in the sandbox.
    fixed = await call_tool(remote_env, "read_file", {"file_path": "calc.py"})
    assert "return a + b" in fixed.output

    # The trace is the stream without partials, and replays to exactly what the model saw.
    trace_file = load(path)
    assert trace_file.meta.session_id == remote_env.session_id
    assert [omni.to_dict(m) for m in trace_file.messages] == [
        omni.to_dict(m) for m in [prompt, *out] if not omni.is_partial_payload(m)]
    assert [omni.to_dict(m) for m in trace_file.context()] == [
        omni.to_dict(m) for m in model.history]


async def test_denied_calls_never_reach_envd(remote_env: RemoteEnvironment) -> None:
    model = ScriptedModel([
        {"tool_calls": [call("write_file", file_path="denied.txt", content="x"),
                        call("exec_command", cmd="touch /workspace/also-denied")]},
        {"text": "Understood."},
    ])
    out = await run_task(model, remote_env)
    assert_one_output_per_call(out)
    assert [d.decision for d in of_type(out, omni.ApprovalDecisionPayload)] == ["deny", "deny"]
    assert [(m.payload.output, m.payload.stop_reason) for m in model.requests[1]] == [  # type: ignore[attr-defined]
        (DENIED_NOTE, "aborted")] * 2
    listing = await call_tool(remote_env, "exec_command", {"cmd": "ls -A /workspace"})
    assert "denied" not in listing.output


async def test_a_throwing_approver_denies(remote_env: RemoteEnvironment) -> None:
    async def approver(tool_call: OmniMessage) -> ApprovalDecision:
        if "rm " in tool_call.payload.arguments:  # type: ignore[attr-defined]
            raise PermissionError("policy engine crashed")
        return "allow"

    model = ScriptedModel([
        {"tool_calls": [call("exec_command", cmd="echo keep > /workspace/keep.txt"),
                        call("exec_command", cmd="rm /workspace/keep.txt")]},
        {"text": "ok"},
    ])
    out = await run_task(model, remote_env, approve=approver)
    assert_one_output_per_call(out)
    assert [d.decision for d in of_type(out, omni.ApprovalDecisionPayload)] == ["allow", "deny"]
    kept, removed = (m.payload for m in model.requests[1])
    assert (kept.stop_reason, removed.output) == ("completed", DENIED_NOTE)  # type: ignore[attr-defined]
    still = await call_tool(remote_env, "read_file", {"file_path": "keep.txt"})
    assert "keep" in still.output


async def test_tool_timeout_is_fed_back_to_the_model(envd_daemon: DaemonProcess) -> None:
    env = await RemoteEnvironment.create(
        envd_daemon.target, token=envd_daemon.token,
        tools={"exec_command": pb.ToolOverride(timeout_ms=1000)})
    try:
        model = ScriptedModel([{"tool_calls": [call("exec_command", cmd="sleep 5")]},
                               {"text": "That took too long."}])
        out = await run_task(model, env, approve=allow)
    finally:
        await env.dispose()
    assert_one_output_per_call(out)
    (timed_out,) = outputs(out)
    assert (timed_out.output, timed_out.stop_reason) == ("[tool timeout: exceeded 1000ms]",
                                                         "failed")
    assert model.requests[1][0].payload == timed_out
    assert of_type(out, omni.RequestEndPayload)[-1].status == "completed"
    assert not of_type(out, omni.AbortPayload)


async def test_interrupt_mid_tool(remote_env: RemoteEnvironment) -> None:
    model = ScriptedModel([
        {"tool_calls": [call("exec_command", cmd="echo started; sleep 60"),
                        call("exec_command", cmd="echo quick")]},
        {"text": "Stopped as asked."},
    ])
    session = AgentSession(model, remote_env)
    try:
        await _interrupt_and_resume(session, model)
    finally:
        await session.aclose()


async def _interrupt_and_resume(session: AgentSession, model: ScriptedModel) -> None:
    stop = asyncio.Event()
    out: list[OmniMessage] = []
    seen: set[str] = set()
    async for message in session.run([omni.user_text("go")], approve=allow, signal=stop):
        out.append(message)
        payload = message.payload
        if isinstance(payload, omni.PartialToolCallOutputPayload) and "started" in payload.output:
            seen.add("started")
        if isinstance(payload, omni.ToolCallOutputPayload) and payload.output == "quick\n":
            seen.add("quick")
        if seen == {"started", "quick"}:  # one call finished, the other still running
            stop.set()
    assert_one_output_per_call(out)
    assert isinstance(out[-1].payload, omni.AbortPayload)  # abort is the last message
    assert len(of_type(out, omni.RequestBeginPayload)) == 1  # no request after the interrupt
    slow, quick = (m.payload for m in session.carry_over)  # re-fed in call order
    assert isinstance(slow, omni.ToolCallOutputPayload)
    assert slow.stop_reason == "aborted"
    assert slow.output.startswith("started\n") and slow.output.endswith(INTERRUPTED)
    assert quick.output == "quick\n"  # type: ignore[attr-defined]

    # The next run sends the interrupted batch's outputs first, then the new prompt.
    follow_up = omni.user_text("never mind")
    rest = [m async for m in session.run([follow_up], approve=allow)]
    assert model.requests[1] == [*session_outputs(out), follow_up]
    assert of_type(rest, omni.RequestEndPayload)[-1].status == "completed"


def session_outputs(messages: list[OmniMessage]) -> list[OmniMessage]:
    order = [c.tool_call_id for c in of_type(messages, omni.ToolCallPayload)]
    done = {m.payload.tool_call_id: m for m in messages
            if isinstance(m.payload, omni.ToolCallOutputPayload)}
    return [done[c] for c in order]


async def _close_all(daemon: DaemonProcess) -> None:
    async with EnvdClient(daemon.target, daemon.token) as client:
        for session in await client.list_sessions():
            await client.close_session(session.session_id)


@pytest.fixture
def short_dir(docker_ready: None) -> Iterator[Path]:
    # envd puts unix sockets under its data dir: pytest's tmp_path is too long for AF_UNIX.
    root = Path(tempfile.mkdtemp(prefix="envd-engine-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_envd_vanishing_mid_turn(short_dir: Path) -> None:
    data_dir = short_dir / "data"
    daemon = DaemonProcess(data_dir, image=IMAGE).start()
    env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
    try:
        model = ScriptedModel([
            {"tool_calls": [call("exec_command", cmd="echo started; sleep 60")]},
            {"text": "The environment went away."},
        ])
        session = AgentSession(model, env, retry=FAST)
        out: list[OmniMessage] = []
        async for message in session.run([omni.user_text("go")], approve=allow):
            out.append(message)
            payload = message.payload
            if (isinstance(payload, omni.PartialToolCallOutputPayload)
                    and "started" in payload.output):
                await asyncio.to_thread(daemon.stop, signals.SIGKILL)
        await session.aclose()
        assert_one_output_per_call(out)
        (lost,) = outputs(out)
        assert lost.stop_reason == "failed"
        assert lost.output.startswith("started\n")
        assert "[tool error] envd is unreachable" in lost.output
        assert model.requests[1][0].payload == lost  # the model is told, and answers
        assert of_type(out, omni.RequestEndPayload)[-1].status == "completed"
        assert not of_type(out, omni.AbortPayload)
    finally:
        # Bring envd back on the same data dir and port to close the session (no leaked
        # container), then let it go.
        daemon = DaemonProcess(data_dir, image=IMAGE, port=daemon.port)
        try:
            daemon.start()
            await _close_all(daemon)
            await env.dispose()
        finally:
            daemon.stop()


async def test_background_completion_reaches_the_model(remote_env: RemoteEnvironment) -> None:
    model = ScriptedModel([
        {"tool_calls": [call("exec_command", cmd="sleep 1; echo bg-finished",
                             run_in_background=True)]},
        {"tool_calls": [call("exec_command", cmd="sleep 4")]},
        {"text": "The background job is done."},
    ])
    session = AgentSession(model, remote_env)
    out = [m async for m in session.run([omni.user_text("go")], approve=allow)]
    await session.aclose()
    assert_one_output_per_call(out)
    started = outputs(out)[0].output
    assert "[command running in background with process_id proc-" in started
    process_id = started.split("process_id ")[1].split(";")[0]

    third = model.requests[2]
    assert isinstance(third[0].payload, omni.ToolCallOutputPayload)  # the batch's output first
    report = third[1].payload
    assert isinstance(report, omni.TextPayload) and report.role == "user"
    assert report.text.startswith("[background_task_done]\nkind: command\n"
                                  f"id: {process_id}\nstatus: completed\n")
    assert report.text.endswith("bg-finished\n")
    # It is on the stream (and so in the trace) right before the request it starts.
    index = next(i for i, m in enumerate(out) if m.payload is report)
    assert isinstance(out[index + 1].payload, omni.RequestBeginPayload)

