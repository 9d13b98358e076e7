"""docs/grpcurl.md, run as written: every block with the real grpcurl against a real daemon.

The blocks form one script (later blocks use the variables earlier ones set), so the whole
walk-through runs once, with a marker line before each block, and each block's output is then
checked on its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envd.v1 import environment_pb2 as pb
from tests.daemon import DaemonProcess
from tests.e2e.test_grpcurl import grpcurl, grpcurl_path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "grpcurl.md"
BLOCK = re.compile(r"<!-- block: (\S+) -->\n```sh\n(.*?)```", re.S)
MARKER = "::envd-doc-block {}::"
RPCS = [m.name for m in pb.DESCRIPTOR.services_by_name["Environment"].methods]


def doc_blocks() -> list[tuple[str, str]]:
    text = DOC.read_text()
    blocks = BLOCK.findall(text)
    assert len(blocks) == text.count("```sh"), "every sh block needs a <!-- block: NAME --> id"
    return blocks


def json_values(text: str) -> list[Any]:
    """The JSON values grpcurl printed one after another."""
    decoder, position, values = json.JSONDecoder(), 0, []
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        value, position = decoder.raw_decode(text, position)
        values.append(value)
    return values


@pytest.fixture(scope="module")
def outputs(envd_daemon: DaemonProcess) -> Iterator[dict[str, str]]:
    script = "".join(f"echo '{MARKER.format(name)}'\n{body}" for name, body in doc_blocks())
    env = dict(os.environ, ENVD=envd_daemon.target, TOKEN=envd_daemon.token)
    env["PATH"] = f"{Path(grpcurl_path()).parent}:{env['PATH']}"
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                                text=True, env=env, timeout=180)
    finally:
        _close_doc_sessions(envd_daemon)
    assert result.returncode == 0, f"the walk-through failed:\n{result.stdout}\n{result.stderr}"
    parts = re.split(r"^::envd-doc-block (\S+)::\n", result.stdout, flags=re.M)
    yield dict(zip(parts[1::2], parts[2::2], strict=True))


def _close_doc_sessions(daemon: DaemonProcess) -> None:
    """A walk-through that failed half-way must not leave its session behind."""
    listed = grpcurl(daemon, "envd.v1.Environment/ListSessions", token=daemon.token,
                     data='{"labels": {"owner": "grpcurl-doc"}}')
    for found in json.loads(listed.stdout or "{}").get("sessions", []):
        grpcurl(daemon, "envd.v1.Environment/CloseSession", token=daemon.token,
                data=json.dumps({"session_id": found["session_id"]}))


def test_the_walkthrough_covers_every_rpc() -> None:
    commands = "".join(body for _, body in doc_blocks())
    for rpc in RPCS:
        assert f"envd.v1.Environment/{rpc}" in commands, f"docs/grpcurl.md lacks {rpc}"
    assert "grpc.health.v1.Health/Check" in commands
    assert '"$ENVD" list' in commands and '"$ENVD" describe' in commands


def check_setup(out: str) -> None:
    assert out == ""


def check_reflection(out: str) -> None:
    services = out.split("envd.v1.Environment is a service:")[0].split()
    assert {"envd.v1.Environment", "grpc.health.v1.Health"} <= set(services)
    for rpc in RPCS:
        assert f"rpc {rpc} (" in out
    assert "rpc UploadFiles ( stream .envd.v1.UploadFilesRequest )" in out
    assert "returns ( stream .envd.v1.DownloadFilesChunk )" in out
    assert "bytes data = 3;" in out


def check_health(out: str) -> None:
    assert json_values(out) == [{"status": "SERVING"}] * 2


def check_unauthenticated(out: str) -> None:
    assert "Code: Unauthenticated" in out and "Traceback" not in out


def check_create(out: str) -> None:
    (session,) = json_values(out)
    assert re.fullmatch(r"s-[0-9a-f]{20}", session["session_id"])
    assert session["state"] == "SESSION_STATE_RUNNING"
    assert session["labels"] == {"owner": "grpcurl-doc"}
    assert session["env_defaults"] == {"GREETING": "hello from the sandbox"}
    assert session["tools"] == {"exec_command": {"timeout_ms": "30000"}}  # int64: a string
    assert session["workspace"] == "/workspace"


def check_get(out: str) -> None:
    session, listing = json_values(out)
    assert session["state"] == "SESSION_STATE_RUNNING"
    assert [s["session_id"] for s in listing["sessions"]] == [session["session_id"]]


def check_not_found(out: str) -> None:
    assert "Code: NotFound" in out and "s-00000000000000000000" in out
    assert "Code: InvalidArgument" in out and "malformed session_id" in out


def check_tools(out: str) -> None:
    lines = set(out.splitlines())
    assert {"exec_command rw", "read_file r", "write_file rw", "edit_file rw"} <= lines


def check_permission(out: str) -> None:
    assert json_values(out) == [{"permission": "r"}, {"permission": ""}]


def check_execute(out: str) -> None:
    messages = json_values(out)
    partials = [m["partial_tool_call_output"] for m in messages[:-1]]
    assert [p["event_type"] for p in partials][0] == "start"
    assert [p["event_type"] for p in partials][-1] == "stop"
    assert "".join(p.get("output", "") for p in partials) == \
        "hello from the sandbox\n\n[exit code: 3]"
    final = messages[-1]["tool_call_output"]
    assert final == {"role": "user", "output": "hello from the sandbox\n\n[exit code: 3]",
                     "tool_call_id": "call-1", "stop_reason": "failed"}


def check_cancel(out: str) -> None:
    answer, _, grepped = out.partition("}\n")
    assert json.loads(answer + "}") == {"cancelled": True}
    assert '"event_type": "stop"' in grepped
    assert grepped.strip().splitlines()[-1].strip() == '"stop_reason": "aborted"'


def check_watch(out: str) -> None:
    (event,) = json_values(out)
    finished = event["command_finished"]
    assert finished["status"] == "completed"
    assert finished["output_tail"] == "finished in the background\n"
    assert finished["process_id"].startswith("proc-")


def check_upload(out: str) -> None:
    assert json_values(out) == [{"destination": "/workspace/uploaded", "entries": "4",
                                 "bytes": "10240"}]


def check_upload_refused(out: str) -> None:
    assert "Code: InvalidArgument" in out
    assert "entry '../evil' leaves the destination" in out


def check_download(out: str) -> None:
    assert out.splitlines() == ["drwxr-xr-x project/", "drwxr-xr-x project/bin/",
                                "-rwxr-xr-x project/bin/tool", "-rw-r--r-- project/main.py"]


def check_close(out: str) -> None:
    closed, again, rest = out.split("}\n", 2)
    assert json.loads(closed + "}") == {"closed": True}
    assert json.loads(again + "}") == {"closed": False}
    assert '"session_closed"' in rest and '"reason": "closed"' in rest
    assert "Code: NotFound" in rest


CHECKS: dict[str, Callable[[str], None]] = {
    name.removeprefix("check_").replace("_", "-"): check
    for name, check in dict(globals()).items() if name.startswith("check_")
}


def test_every_block_has_a_check() -> None:
    assert [name for name, _ in doc_blocks()] == list(CHECKS)


@pytest.mark.parametrize("block", list(CHECKS))
def test_block_output(outputs: dict[str, str], block: str) -> None:
    CHECKS[block](outputs[block])
