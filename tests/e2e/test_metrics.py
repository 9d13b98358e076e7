"""/metrics counts what the daemon did."""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest

from engine.remote import RemoteEnvironment
from tests.conftest import IMAGE
from tests.daemon import DaemonProcess, free_port
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


async def test_metrics_count_calls(docker_ready: None) -> None:
    root = Path(tempfile.mkdtemp(prefix="envd-metrics-"))
    port = free_port()
    daemon = DaemonProcess(root / "data", image=IMAGE,
                           extra_args=["--metrics-listen", f"127.0.0.1:{port}"]).start()
    try:
        env = await RemoteEnvironment.create(daemon.target, token=daemon.token)
        for _ in range(3):
            await call_tool(env, "exec_command", {"cmd": "echo hi"})
        await call_tool(env, "exec_command", {"cmd": "exit 1"})
        await call_tool(env, "read_file", {"file_path": "missing.txt"})
        await call_tool(env, "exec_command", {"cmd": "seq 1 10000"})
        values = scrape(port)
        assert values['envd_tool_calls_total{outcome="completed",tool="exec_command"}'] == 4
        assert values['envd_tool_calls_total{outcome="failed",tool="exec_command"}'] == 1
        assert values['envd_tool_calls_total{outcome="failed",tool="read_file"}'] == 1
        assert values['envd_tool_call_duration_seconds_count{tool="exec_command"}'] == 5
        assert values['envd_sessions{state="running"}'] == 1
        assert values['envd_sessions_created_total{start="cold"}'] == 1
        assert values["envd_output_archived_bytes_total"] == len(
            "".join(f"{i}\n" for i in range(1, 10001)))
        assert values["envd_output_streamed_chars_total"] > 16000
        await env.dispose()
        assert scrape(port)['envd_sessions{state="running"}'] == 0
        # Structured logs carry the ids, never a secret.
        log = daemon.log()
        assert '"tool_call_id": "call-' in log and '"session_id": "s-' in log
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
