"""``engine run`` as a user runs it: a subprocess against a real envd, with a scripted model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import omni
from engine.client import EnvdClient
from engine.trace import load
from envd.v1 import environment_pb2 as pb
from tests.daemon import ROOT, DaemonProcess

pytestmark = pytest.mark.docker


def engine_run(daemon: DaemonProcess, script: list[dict[str, Any]], tmp_path: Path,
               *options: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps({"turns": script}))
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "--envd", daemon.target,
         "--token", daemon.token, "--script", str(script_file), *options,
         "Say hello from the sandbox."],
        cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120,
    )


def still_open(daemon: DaemonProcess, session_id: str) -> bool:
    async def check() -> bool:
        async with EnvdClient(daemon.target, daemon.token) as client:
            return any(s.session_id == session_id and s.state != pb.SESSION_STATE_CLOSED
                       for s in await client.list_sessions())
    return asyncio.run(check())


HELLO: list[dict[str, Any]] = [
    {"thinking": "Write a script, then run it.", "text": "Writing hello.py.",
     "tool_calls": [{"name": "write_file",
                     "arguments": {"file_path": "hello.py",
                                   "content": "print('hello from the sandbox')\n"}}]},
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "python3 hello.py"}}]},
    {"text": "It printed the greeting."},
]


def test_run_renders_the_task_and_closes_its_session(envd_daemon: DaemonProcess,
                                                     tmp_path: Path) -> None:
    trace_path = tmp_path / "run.jsonl"
    done = engine_run(envd_daemon, HELLO, tmp_path, "--approve", "all", "--trace", str(trace_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "Write a script, then run it." in lines
    assert "Writing hello.py." in lines
    assert "→ write_file hello.py" in lines
    assert "→ exec_command $ python3 hello.py" in lines
    assert "  │ hello from the sandbox" in lines
    assert lines[-1] == "It printed the greeting."

    trace = load(trace_path)
    assert trace.meta.provider == "scripted" and trace.meta.workspace == "/workspace"
    assert "exec_command" in [t.name for t in trace.meta.tools]
    context = trace.context()
    assert isinstance(context[0].payload, omni.TextPayload)
    assert context[0].payload.text == "Say hello from the sandbox."
    ran = [m.payload for m in context if isinstance(m.payload, omni.ToolCallOutputPayload)]
    assert ran[1].output == "hello from the sandbox\n"
    assert not still_open(envd_daemon, trace.meta.session_id)


def test_interactive_approval(envd_daemon: DaemonProcess, tmp_path: Path) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo first"}},
                        {"name": "exec_command", "arguments": {"cmd": "echo second"}}]},
        {"text": "ok"},
    ]
    done = engine_run(envd_daemon, script, tmp_path, "--json", stdin="y\nn\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("allow exec_command? [y]es, [n]o, [a]lways exec_command:") == 2
    messages = [omni.parse(line) for line in done.stdout.splitlines()]
    decisions = [m.payload.decision for m in messages
                 if isinstance(m.payload, omni.ApprovalDecisionPayload)]
    assert decisions == ["allow", "deny"]
    calls = [m.payload.tool_call_id for m in messages
             if isinstance(m.payload, omni.ToolCallPayload)]
    results = {m.payload.tool_call_id: (m.payload.output, m.payload.stop_reason)
               for m in messages if isinstance(m.payload, omni.ToolCallOutputPayload)}
    assert [results[c] for c in calls] == [("first\n", "completed"),
                                           ("Tool call denied by user.", "aborted")]


def test_failed_model_exits_non_zero(envd_daemon: DaemonProcess, tmp_path: Path) -> None:
    done = engine_run(envd_daemon, [{"error": "auth", "message": "bad key"}], tmp_path)
    assert done.returncode == 1
    assert "[model request auth: bad key]" in done.stdout
