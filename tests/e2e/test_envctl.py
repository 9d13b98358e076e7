"""The envctl console script, run as a subprocess against a real daemon."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess
from tests.e2e.test_transfer import snapshot

ENVCTL = Path(sys.executable).parent / "envctl"


@pytest.fixture
def env(envd_daemon: DaemonProcess) -> dict[str, str]:
    if not ENVCTL.exists():
        pytest.fail("the envctl console script is missing: pip install -e .")
    variables = {k: v for k, v in os.environ.items() if not k.startswith("ENVD_")}
    return dict(variables, ENVD_TARGET=envd_daemon.target, ENVD_TOKEN=envd_daemon.token)


def envctl(env: dict[str, str], *args: str,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ENVCTL), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture
def session(env: dict[str, str]) -> Iterator[str]:
    created = envctl(env, "session", "create", "--label", "suite=envctl")
    assert created.returncode == 0, created.stderr
    session_id = created.stdout.strip()
    yield session_id
    envctl(env, "session", "rm", session_id)


def test_session_create_ls_show_rm(env: dict[str, str]) -> None:
    created = envctl(env, "session", "create", "--label", "owner=envctl-test", "--env", "A=1")
    assert created.returncode == 0, created.stderr
    session_id = created.stdout.strip()
    assert session_id.startswith("s-") and len(session_id) == 22

    listed = envctl(env, "session", "ls", "--label", "owner=envctl-test")
    assert listed.returncode == 0, listed.stderr
    assert session_id in listed.stdout and "running" in listed.stdout
    as_json = json.loads(envctl(env, "session", "ls", "--json").stdout)
    assert session_id in [s["session_id"] for s in as_json]

    shown = envctl(env, "session", "show", session_id)
    assert shown.returncode == 0, shown.stderr
    assert "running" in shown.stdout and "/workspace" in shown.stdout
    detail = json.loads(envctl(env, "session", "show", session_id, "--json").stdout)
    assert detail["labels"] == {"owner": "envctl-test"} and detail["env_defaults"] == {"A": "1"}

    removed = envctl(env, "session", "rm", session_id)
    assert removed.returncode == 0 and f"{session_id} closed" in removed.stdout
    again = envctl(env, "session", "rm", session_id)
    assert "already closed" in again.stdout
    gone = envctl(env, "session", "show", session_id)
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr and "Traceback" not in gone.stderr
    assert session_id not in envctl(env, "session", "ls").stdout


def test_exec_streams_output_and_passes_the_exit_code(env: dict[str, str], session: str) -> None:
    result = envctl(env, "exec", session, "--", "sh", "-c", "echo hi; exit 7")
    assert result.stdout == "hi\n"
    assert result.returncode == 7
    assert "[exit code" not in result.stdout + result.stderr

    ok = envctl(env, "exec", session, "--", "ls", "-a", "/workspace")
    assert ok.returncode == 0 and ok.stdout.split() == [".", ".."]
    shell = envctl(env, "exec", session, "echo out; echo err >&2; cd /tmp && pwd")
    assert shell.returncode == 0 and shell.stdout == "out\nerr\n/tmp\n"
    killed = envctl(env, "exec", session, "kill -KILL $$")
    assert killed.returncode == 128 + 9
    assert "terminated by signal SIGKILL" in killed.stderr
    empty = envctl(env, "exec", session, "true")
    assert empty.returncode == 0 and empty.stdout == "" and empty.stderr == ""


def test_exec_streams_live(env: dict[str, str], session: str) -> None:
    proc = subprocess.Popen([str(ENVCTL), "exec", session, "echo first; sleep 2; echo second"],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    started = time.monotonic()
    assert proc.stdout.readline() == "first\n"
    assert time.monotonic() - started < 10
    assert proc.poll() is None  # still running: the first line came while the command ran
    assert proc.stdout.readline() == "second\n"
    assert proc.wait(30) == 0


def test_exec_follows_a_command_past_its_yield_window(env: dict[str, str]) -> None:
    created = envctl(env, "session", "create", "--timeout", "exec_command=2500")
    session_id = created.stdout.strip()
    try:
        # exec_command yields after 1.5 s; envctl keeps polling the command session.
        result = envctl(env, "exec", session_id, "sleep 3; echo done; exit 3")
        assert result.stdout == "done\n"
        assert result.returncode == 3
    finally:
        envctl(env, "session", "rm", session_id)


def test_tool_and_tools(env: dict[str, str], session: str) -> None:
    listed = envctl(env, "tools", session)
    assert listed.returncode == 0
    for name in ("exec_command", "read_file", "write_file"):
        assert name in listed.stdout
    schemas = json.loads(envctl(env, "tools", session, "--json").stdout)
    assert {t["name"]: t["parameters"]["type"] for t in schemas}["read_file"] == "object"

    wrote = envctl(env, "tool", session, "write_file",
                   json.dumps({"file_path": "notes.txt", "content": "alpha\nbeta\n"}))
    assert wrote.returncode == 0, wrote.stdout
    read = envctl(env, "tool", session, "read_file", '{"file_path": "notes.txt"}')
    assert read.returncode == 0 and "alpha" in read.stdout and "beta" in read.stdout
    messages = envctl(env, "tool", session, "read_file", '{"file_path": "notes.txt"}', "--json")
    kinds = [json.loads(line) for line in messages.stdout.splitlines()]
    assert kinds[0]["partial_tool_call_output"]["event_type"] == "start"
    assert kinds[-1]["tool_call_output"]["stop_reason"] == "completed"
    missing = envctl(env, "tool", session, "read_file", '{"file_path": "nope.txt"}')
    assert missing.returncode == 1
    bad = envctl(env, "tool", session, "read_file", "{not json")
    assert bad.returncode == 2 and "not JSON" in bad.stderr


def test_cp_both_ways_with_progress(env: dict[str, str], session: str, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(os.urandom(3 << 20))
    (tree / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (tree / "tool.sh").chmod(0o755)
    (tree / "link").symlink_to("sub/data.bin")

    up = envctl(env, "cp", "--progress", str(tree), f"{session}:incoming")
    assert up.returncode == 0, up.stderr
    assert "100%" in up.stderr and "/workspace/incoming" in up.stderr
    assert envctl(env, "exec", session, "incoming/tree/tool.sh").stdout == "tool\n"

    down = envctl(env, "cp", "--progress", f"{session}:incoming/tree", str(tmp_path / "back"))
    assert down.returncode == 0, down.stderr
    assert "100%" in down.stderr
    assert snapshot(tmp_path / "back") == snapshot(tree)

    # Into an existing directory: the copy lands inside it, under its own name.
    (tmp_path / "into").mkdir()
    single = envctl(env, "cp", f"{session}:incoming/tree/tool.sh", str(tmp_path / "into"))
    assert single.returncode == 0 and "%" not in single.stderr  # no progress off a terminal
    assert (tmp_path / "into" / "tool.sh").read_text() == "#!/bin/sh\necho tool\n"

    missing = envctl(env, "cp", f"{session}:no/such", str(tmp_path / "x"))
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    assert not (tmp_path / "x").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".envctl-")] == []


def test_cp_draws_a_progress_bar_on_a_terminal(
    env: dict[str, str], session: str, tmp_path: Path
) -> None:
    (tmp_path / "blob").write_bytes(os.urandom(2 << 20))
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(ENVCTL), "cp", str(tmp_path / "blob"), f"{session}:"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                            env=dict(env, COLUMNS="120"))
    os.close(slave)
    drawn = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    assert proc.wait(30) == 0
    text = drawn.decode("utf-8", "replace")
    assert "━" in text and "100%" in text and "2.1/2.1 MB" in text


def test_events_follow_a_session(env: dict[str, str], session: str) -> None:
    started = envctl(env, "tool", session, "exec_command",
                     json.dumps({"cmd": "sleep 1; echo from-bg; exit 4",
                                 "run_in_background": True}))
    assert "process_id proc-" in started.stdout
    process_id = started.stdout.split("process_id ")[1].split(";")[0]
    watcher = subprocess.Popen([str(ENVCTL), "events", session], stdout=subprocess.PIPE,
                               text=True, env=env)
    assert watcher.stdout is not None
    line = watcher.stdout.readline()
    assert process_id in line and "failed (exit code 4)" in line
    assert watcher.stdout.readline().strip() == "from-bg"
    envctl(env, "session", "rm", session)
    assert "session closed (closed)" in watcher.stdout.readline()
    assert watcher.wait(30) == 0
