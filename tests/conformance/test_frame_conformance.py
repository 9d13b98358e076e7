"""The execution frame and exec_command, as every Environment must behave (reference §2, §3)."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time

import pytest

from engine.interface import EnvironmentInterface
from tests.helpers import call_tool

pytestmark = pytest.mark.anyio

SEQ_OUTPUT = "".join(f"{i}\n" for i in range(1, 100001))
ARCHIVED = re.compile(r"\[output archived: (/\S+)\]$")


async def test_echo_completes(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "echo hello"})
    assert (result.output, result.stop_reason) == ("hello\n", "completed")


async def test_stdout_and_stderr_share_one_stream(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "echo out; echo err >&2; echo out2"})
    assert result.output == "out\nerr\nout2\n"


async def test_no_output_is_marked(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "true"})
    assert (result.output, result.stop_reason) == ("[no output]", "completed")


async def test_exit_code_note(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "echo partial; exit 3"})
    assert (result.output, result.stop_reason) == ("partial\n\n[exit code: 3]", "failed")
    result = await call_tool(env, "exec_command", {"cmd": "exit 3"})
    assert (result.output, result.stop_reason) == ("[exit code: 3]", "failed")


async def test_signal_note(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "kill -TERM $$"})
    assert (result.output, result.stop_reason) == ("[terminated by signal SIGTERM]", "failed")


async def test_truncation_archive_and_recovery(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "seq 1 100000"})
    assert result.stop_reason == "completed"
    head, marker, note = result.output.rsplit("\n", 2)
    assert head == SEQ_OUTPUT[:16000]
    assert marker == "[output truncated: exceeded 16000 chars]"
    assert result.output.index(marker) == 16001
    match = ARCHIVED.match(note)
    assert match, note
    path = match.group(1)
    assert re.search(r"/truncated-tool-output/exec_command-[0-9a-f]{16}\.log$", path)

    # The same spelling works inside a shell command...
    digest = hashlib.sha256(SEQ_OUTPUT.encode()).hexdigest()
    check = await call_tool(env, "exec_command", {"cmd": f"sha256sum < {path}"})
    assert check.output.split()[0] == digest
    # ... and as a read_file argument, page after page.
    lines: list[str] = []
    offset = 1
    while True:
        page = await call_tool(env, "read_file", {"file_path": path, "offset": offset,
                                                   "limit": 2000})
        assert page.stop_reason == "completed", page.output[-300:]
        numbered = [ln for ln in page.output.split("\n") if re.match(r"^ *\d+\t", ln)]
        lines.extend(ln.split("\t", 1)[1] for ln in numbered)
        if "call again with offset" not in page.output:
            break
        offset += len(numbered)
    assert "\n".join(lines) + "\n" == SEQ_OUTPUT


async def test_archive_cannot_be_rewritten_by_sandboxed_code(make_env) -> None:  # type: ignore[no-untyped-def]
    env = await make_env()
    if make_env.kind == "local":
        pytest.skip("the local backend has no isolation")
    result = await call_tool(env, "exec_command", {"cmd": "seq 1 20000"})
    path = ARCHIVED.search(result.output).group(1)  # type: ignore[union-attr]
    attack = await call_tool(env, "exec_command",
                             {"cmd": f"echo evil > {path} || rm -f {path} || true; head -1 {path}"})
    assert attack.output.endswith("1\n")


async def test_timeout_kills_the_command(make_env) -> None:  # type: ignore[no-untyped-def]
    env = await make_env(tools={"exec_command": {"timeout_ms": 1000}})
    started = time.monotonic()
    result = await call_tool(env, "exec_command", {"cmd": "echo begun; sleep 30.4242"})
    assert time.monotonic() - started < 5
    assert result.stop_reason == "failed"
    assert result.output == "begun\n\n[tool timeout: exceeded 1000ms]"
    left = await call_tool(env, "exec_command", {"cmd": "pgrep -f 'sleep 30[.]4242' || echo none"})
    assert left.output == "none\n"


async def test_abort_ends_the_call(env: EnvironmentInterface) -> None:
    signal = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, signal.set)
    started = time.monotonic()
    result = await call_tool(env, "exec_command", {"cmd": "echo begun; sleep 30.4343"},
                             signal=signal)
    assert time.monotonic() - started < 2.5
    assert (result.output, result.stop_reason) == (
        "begun\n\n[interrupted: tool aborted by user]", "aborted")
    left = await call_tool(env, "exec_command", {"cmd": "pgrep -f 'sleep 30[.]4343' || echo none"})
    assert left.output == "none\n"


async def test_unknown_tool(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "no_such_tool", {})
    assert (result.output, result.stop_reason) == ("Unknown tool: no_such_tool", "failed")
    assert len(result.deltas) == 1


async def test_empty_and_invalid_arguments(env: EnvironmentInterface) -> None:
    empty = await call_tool(env, "exec_command", "  ")
    assert empty.output == (
        'Tool call "exec_command" failed: the arguments field is empty. '
        "Re-issue the call with a complete JSON object."
    )
    invalid = await call_tool(env, "exec_command", '{"cmd": ')
    assert invalid.stop_reason == "failed"
    assert invalid.output.startswith('Tool call "exec_command" failed: the arguments are not '
                                     "valid JSON (")
    assert invalid.output.endswith("). Re-issue the call with one complete, valid JSON object.")


async def test_non_object_arguments_are_an_empty_object(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", "[1, 2]")
    assert (result.output, result.stop_reason) == (
        'Missing required argument "cmd" for exec_command.', "failed")


async def test_invalid_utf8_and_nul_bytes(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": r"printf 'a\377b\000c\n'"})
    assert result.output == "a\ufffdb\x00c\n"


async def test_workdir(env: EnvironmentInterface) -> None:
    await call_tool(env, "exec_command", {"cmd": "mkdir -p sub/dir"})
    result = await call_tool(env, "exec_command", {"cmd": "pwd", "workdir": "sub/dir"})
    assert result.output.endswith("/sub/dir\n")
    missing = await call_tool(env, "exec_command", {"cmd": "pwd", "workdir": "/nonexistent"})
    assert missing.stop_reason == "failed"
    assert missing.output.startswith("[spawn error: ")


async def test_hardened_environment(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command",
                             {"cmd": "echo $TERM $PAGER $GIT_PAGER $NO_COLOR $GIT_TERMINAL_PROMPT"})
    assert result.output == "dumb cat cat 1 0\n"


async def test_background_children_die_with_the_foreground(env: EnvironmentInterface) -> None:
    result = await call_tool(env, "exec_command", {"cmd": "(sleep 31.5151 &) ; echo started"})
    assert result.output == "started\n"
    left = await call_tool(env, "exec_command", {"cmd": "pgrep -f 'sleep 31[.]5151' || echo none"})
    assert left.output == "none\n"


async def test_tool_permissions_and_definitions(env: EnvironmentInterface) -> None:
    assert await env.tool_permission("exec_command") == "rw"
    assert await env.tool_permission("read_file") == "r"
    assert await env.tool_permission("nope") is None
    tools = {t.name: t for t in await env.list_tools()}
    assert {"exec_command", "read_file", "write_file", "edit_file"} <= set(tools)
    schema = tools["exec_command"].parameters
    assert schema is not None and schema["type"] == "object" and schema["required"] == ["cmd"]


async def test_calls_run_concurrently(env: EnvironmentInterface) -> None:
    started = time.monotonic()
    results = await asyncio.gather(
        *(call_tool(env, "exec_command", {"cmd": f"sleep 1; echo {i}"}) for i in range(4))
    )
    assert [r.output for r in results] == [f"{i}\n" for i in range(4)]
    assert time.monotonic() - started < 3.5


async def test_isolation_kind(make_env) -> None:  # type: ignore[no-untyped-def]
    env = await make_env()
    result = await call_tool(env, "exec_command", {"cmd": "dmesg 2>&1 | head -1"})
    if make_env.kind == "gvisor":
        assert "Starting gVisor" in result.output
    elif make_env.kind in ("docker", "remote"):
        assert "gVisor" not in result.output
