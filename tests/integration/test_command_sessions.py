"""Command sessions: exec_command hands a still-running command over to input_command and
kill_command; the reference's texts, on every backend."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Awaitable, Callable

import pytest

from envd.commands import CommandFinished
from envd.environment import SandboxEnvironment
from envd.sessions.session import Session
from tests.helpers import CallResult, call_tool

pytestmark = pytest.mark.anyio

PROCESS_ID = re.compile(r"process_id (proc-[0-9a-f]{8})")
UNKNOWN_INPUT = (
    "[input_command error: unknown process_id {} (the session may have exited and been cleared)]"
)
UNKNOWN_KILL = (
    "[kill_command error: unknown process_id {} (the session may have exited and been cleared)]"
)
MIXED = (
    "[input_command error: chars mixes U+0003 (Ctrl-C) with other content; "
    'send "\\u0003" alone to interrupt]'
)


def running_note(pid: str) -> str:
    return (
        f"[process running with process_id {pid}; "
        "use input_command to send input or poll for output]"
    )


def still_running(pid: str) -> str:
    return f"[process still running with process_id {pid}]"


def killed(pid: str) -> str:
    return f"[process {pid} killed (SIGTERM to the process group, SIGKILL after a grace period)]"


def sleeper() -> tuple[str, str]:
    """A ``sleep`` command unique to this test, and a ``pgrep -f`` pattern for its processes
    only (anchored: not the shells that started them; bracketed: not pgrep's own shell)."""
    nonce = str(int.from_bytes(os.urandom(3), "big"))
    return f"sleep 600.{nonce}", f"^sleep 600[.]{nonce}"


async def start(env: SandboxEnvironment, cmd: str, yield_ms: int = 250) -> str:
    """Run ``cmd`` with exec_command; it must still run at the yield. Its process_id."""
    result = await call_tool(env, "exec_command", {"cmd": cmd, "yield_time_ms": yield_ms})
    match = PROCESS_ID.search(result.output)
    assert match, result.output
    assert result.output.endswith(running_note(match.group(1)))
    assert result.stop_reason == "completed"
    return match.group(1)


async def poll(env: SandboxEnvironment, pid: str, chars: str = "", yield_ms: int = 250,
               signal: asyncio.Event | None = None) -> CallResult:
    args: dict[str, object] = {"process_id": pid, "yield_time_ms": yield_ms}
    if chars:
        args["chars"] = chars
    return await call_tool(env, "input_command", args, signal=signal)


async def read_until(env: SandboxEnvironment, pid: str, expected: str, chars: str = "") -> str:
    """Write ``chars``, then poll until the output seen so far contains ``expected``."""
    seen = ""
    deadline = time.monotonic() + 20
    while True:
        result = await poll(env, pid, chars)
        chars = ""
        assert result.output.endswith(still_running(pid)), result.output
        seen += result.output.removesuffix(still_running(pid)).removesuffix("\n")
        if expected in seen or time.monotonic() > deadline:
            return seen


async def count_processes(env: SandboxEnvironment, pattern: str) -> int:
    result = await call_tool(env, "exec_command", {"cmd": f'pgrep -c -f "{pattern}"'})
    return int(result.output.split("\n")[0])


async def wait_for(condition: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        value = condition()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


# --- exec_command -> input_command ------------------------------------------------------------


async def test_poll_returns_the_rest_and_the_completion(sandbox_env: SandboxEnvironment) -> None:
    result = await call_tool(
        sandbox_env, "exec_command", {"cmd": "sleep 2; echo done", "yield_time_ms": 300}
    )
    match = PROCESS_ID.search(result.output)
    assert match
    pid = match.group(1)
    assert result.output == running_note(pid)
    assert result.stop_reason == "completed"

    # An empty poll waits (up to 120 s by default) until the exit.
    started = time.monotonic()
    result = await call_tool(sandbox_env, "input_command", {"process_id": pid})
    assert result.output == "done\n"
    assert result.stop_reason == "completed"
    assert time.monotonic() - started < 30

    # The exit removed the session.
    result = await call_tool(sandbox_env, "input_command", {"process_id": pid})
    assert result.output == UNKNOWN_INPUT.format(pid)
    assert result.stop_reason == "failed"


async def test_poll_reports_a_failed_exit(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "sleep 1; echo bye; exit 3")
    result = await call_tool(sandbox_env, "input_command", {"process_id": pid})
    assert result.output == "bye\n\n[exit code: 3]"
    assert result.stop_reason == "failed"


async def test_poll_while_running_and_output_kept_between_polls(
    sandbox_env: SandboxEnvironment,
) -> None:
    pid = await start(sandbox_env, 'read line; echo "got $line"; sleep 0.5; echo later; read x')
    result = await poll(sandbox_env, pid)
    assert result.output == still_running(pid)
    assert result.stop_reason == "completed"

    seen = await read_until(sandbox_env, pid, "got one\n", chars="one\n")
    assert seen == "got one\n"

    # Output written while nobody polls waits in the runner for the next poll.
    await wait_for(lambda: _unread(sandbox_env, pid, len("later\n")), "output kept")
    result = await poll(sandbox_env, pid)
    assert result.output == "later\n\n" + still_running(pid)
    result = await poll(sandbox_env, pid, "\n", yield_ms=10_000)
    assert result.output == "[no output]"
    assert result.stop_reason == "completed"
    assert pid not in sandbox_env.session.commands.sessions


async def _unread(env: SandboxEnvironment, pid: str, n: int) -> bool:
    listing = await env.session.channel.call("list")
    return any(p["id"] == pid and p["unread_chars"] >= n for p in listing["procs"])


async def test_cat_echoes_input_and_ctrl_c_interrupts(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "cat")
    seen = await read_until(sandbox_env, pid, "hello\n", chars="hello\n")
    assert seen == "hello\n"
    # Verbatim: no newline added, the text arrives as written.
    seen = await read_until(sandbox_env, pid, "a\tb", chars="a\tb")
    assert seen == "a\tb"
    seen = await read_until(sandbox_env, pid, "\n", chars="\n")
    assert seen == "\n"

    result = await poll(sandbox_env, pid, "\u0003", yield_ms=10_000)
    assert result.output == "[terminated by signal SIGINT]"
    assert result.stop_reason == "failed"
    assert pid not in sandbox_env.session.commands.sessions


async def test_python_repl_survives_ctrl_c(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "python3 -i -q -u")
    seen = await read_until(sandbox_env, pid, "42", chars="print(6 * 7)\n")
    assert "42\n" in seen

    # SIGINT reaches the interpreter, which reports it and goes on.
    seen = await read_until(sandbox_env, pid, "KeyboardInterrupt", chars="\u0003")
    assert "KeyboardInterrupt" in seen
    seen = await read_until(sandbox_env, pid, "still here", chars="print('still here')\n")
    assert "still here\n" in seen

    result = await poll(sandbox_env, pid, "raise SystemExit(5)\n", yield_ms=10_000)
    assert result.output.endswith("[exit code: 5]")
    assert result.stop_reason == "failed"


async def test_interrupting_a_poll_leaves_the_process_running(
    sandbox_env: SandboxEnvironment,
) -> None:
    pid = await start(sandbox_env, 'read line; echo "got $line"; sleep 600')
    entry = sandbox_env.session.commands.sessions[pid]
    abort = asyncio.Event()
    call = asyncio.create_task(poll(sandbox_env, pid, yield_ms=120_000, signal=abort))
    await wait_for(entry.lock.locked, "the poll to start")
    abort.set()
    result = await asyncio.wait_for(call, 15)
    assert result.output == "[interrupted: tool aborted by user]"
    assert result.stop_reason == "aborted"

    # Still there, still reading its input, its output still ours.
    seen = await read_until(sandbox_env, pid, "got after\n", chars="after\n")
    assert seen == "got after\n"
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == killed(pid)


async def test_mixed_ctrl_c_and_unknown_ids(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "cat")
    result = await poll(sandbox_env, pid, "abc\u0003")
    assert result.output == MIXED
    assert result.stop_reason == "failed"
    # Nothing was written: cat has nothing to echo.
    result = await poll(sandbox_env, pid)
    assert result.output == still_running(pid)

    for tool, text in (("input_command", UNKNOWN_INPUT), ("kill_command", UNKNOWN_KILL)):
        result = await call_tool(sandbox_env, tool, {"process_id": "proc-00000000"})
        assert result.output == text.format("proc-00000000")
        assert result.stop_reason == "failed"
        result = await call_tool(sandbox_env, tool, {})
        assert result.output == f'Missing required argument "process_id" for {tool}.'
        assert result.stop_reason == "failed"


# --- kill_command -------------------------------------------------------------------------------


async def test_kill_leaves_no_process(sandbox_env: SandboxEnvironment) -> None:
    cmd, pattern = sleeper()
    pid = await start(sandbox_env, cmd)
    assert await count_processes(sandbox_env, pattern) == 1

    started = time.monotonic()
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == killed(pid)
    assert result.stop_reason == "completed"
    assert time.monotonic() - started < 5

    check = await call_tool(sandbox_env, "exec_command", {"cmd": f'pgrep -f "{pattern}"'})
    assert check.output == "[exit code: 1]"  # pgrep: no process matched
    result = await poll(sandbox_env, pid)
    assert result.output == UNKNOWN_INPUT.format(pid)


async def test_kill_escalates_to_sigkill_for_the_whole_group(
    sandbox_env: SandboxEnvironment,
) -> None:
    cmd, pattern = sleeper()
    # The leader ignores SIGTERM; its background child would outlive a leader-only kill.
    pid = await start(sandbox_env, f"trap '' TERM; {cmd} & {cmd}; wait")
    await wait_for(lambda: _count_is(sandbox_env, pattern, 2), "both sleepers")
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == killed(pid)
    await wait_for(lambda: _count_is(sandbox_env, pattern, 0), "no sleeper left")


async def _count_is(env: SandboxEnvironment, pattern: str, n: int) -> bool:
    return await count_processes(env, pattern) == n


async def test_kill_hands_over_unread_output_first(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "sleep 0.5; echo pending; sleep 600")

    await wait_for(lambda: _unread(sandbox_env, pid, 8), "the output to wait in the runner")
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == "pending\n\n" + killed(pid)
    assert result.stop_reason == "completed"


async def test_kill_after_exit(sandbox_env: SandboxEnvironment) -> None:
    pid = await start(sandbox_env, "sleep 0.5; echo bye; exit 7")
    entry = sandbox_env.session.commands.sessions[pid]
    await wait_for(lambda: entry.exit_info is not None, "the exit")
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    note = f"[process {pid} had already exited (exit code 7); session removed]"
    assert result.output == "bye\n\n" + note
    assert result.stop_reason == "completed"
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == UNKNOWN_KILL.format(pid)
    assert result.stop_reason == "failed"


async def test_kill_during_a_poll(sandbox_env: SandboxEnvironment) -> None:
    cmd, pattern = sleeper()
    pid = await start(sandbox_env, cmd)
    entry = sandbox_env.session.commands.sessions[pid]
    call = asyncio.create_task(poll(sandbox_env, pid, yield_ms=120_000))
    await wait_for(entry.lock.locked, "the poll to start")
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    assert result.output == killed(pid)
    # The poll saw the exit and ends at once.
    result = await asyncio.wait_for(call, 15)
    assert result.output == "[terminated by signal SIGTERM]"
    assert await count_processes(sandbox_env, pattern) == 0


# --- the limit of 64 ----------------------------------------------------------------------------


async def test_65th_session_evicts_exited_first_then_least_recently_used(
    sandbox_env: SandboxEnvironment,
) -> None:
    commands = sandbox_env.session.commands
    assert commands.limit == 64
    cmd, pattern = sleeper()
    ids = await asyncio.gather(
        *(start(sandbox_env, cmd) for _ in range(63)), start(sandbox_env, "sleep 0.5; echo fin")
    )
    exited = ids[-1]
    assert len(commands) == 64
    await wait_for(lambda: commands.sessions[exited].exit_info is not None, "the exit")

    by_use = sorted(ids[:-1], key=lambda pid: commands.sessions[pid].last_used)
    # Using the least recently used one makes the next one the candidate.
    result = await poll(sandbox_env, by_use[0])
    assert result.output == still_running(by_use[0])

    # Full: the exited session goes first, although it was used more recently than any.
    newest = await start(sandbox_env, cmd)
    assert len(commands) == 64
    result = await poll(sandbox_env, exited)
    assert result.output == UNKNOWN_INPUT.format(exited)

    # Then the least recently used running one, and its process with it.
    await start(sandbox_env, cmd)
    assert len(commands) == 64
    result = await poll(sandbox_env, by_use[1])
    assert result.output == UNKNOWN_INPUT.format(by_use[1])
    for pid in (by_use[0], by_use[2], newest):
        result = await poll(sandbox_env, pid)
        assert result.output == still_running(pid)
    await wait_for(lambda: _count_is(sandbox_env, pattern, 64), "64 sleepers")


async def test_a_flood_of_output_does_not_hold_up_the_yield(
    sandbox_env: SandboxEnvironment,
) -> None:
    # Output faster than it is read fills the channel's queue for the process; the detach at
    # the yield (and the attach and kill after it) must still get their replies.
    started = time.monotonic()
    pid = await start(sandbox_env, "yes")
    result = await poll(sandbox_env, pid)
    assert result.output.endswith("\n" + still_running(pid))
    # Let the unread buffer overflow (slower under gVisor), then kill.
    for _ in range(400):
        listing = await sandbox_env.session.channel.call("list")
        unread = {p["id"]: p["unread_chars"] for p in listing["procs"]}
        if unread.get(pid, 0) >= 1 << 20:
            break
        await asyncio.sleep(0.05)
    result = await call_tool(sandbox_env, "kill_command", {"process_id": pid})
    # At most 1 MiB waited in the runner since the poll; the oldest part of it was dropped.
    assert re.match(r"\[\.\.\. \d+ chars of earlier output dropped \.\.\.\]\ny\ny\n", result.output)
    assert result.output.endswith("\n" + killed(pid))
    assert result.stop_reason == "completed"
    assert time.monotonic() - started < 30


async def test_background_command_polled_after_its_exit_is_reported_once(
    sandbox_env: SandboxEnvironment,
) -> None:
    session = sandbox_env.session
    reports: list[CommandFinished] = []
    chained = session.on_finished

    def record(s: Session, finished: CommandFinished) -> None:
        reports.append(finished)
        if chained is not None:
            chained(s, finished)

    session.on_finished = record
    result = await call_tool(sandbox_env, "exec_command",
                             {"cmd": "sleep 0.3; echo hi; exit 4", "run_in_background": True})
    match = PROCESS_ID.search(result.output)
    assert match
    pid = match.group(1)
    await wait_for(lambda: len(reports) == 1, "the completion report")
    assert (reports[0].process_id, reports[0].exit_code, reports[0].output_tail) == (pid, 4, "hi\n")

    # The poll gets the output and the exit once more; the completion is not reported again.
    result = await poll(sandbox_env, pid)
    assert (result.output, result.stop_reason) == ("hi\n\n[exit code: 4]", "failed")
    assert len(reports) == 1


async def test_input_to_an_exited_process_is_reported_not_lost(
    sandbox_env: SandboxEnvironment,
) -> None:
    pid = await start(sandbox_env, "sleep 0.5; echo x")
    entry = sandbox_env.session.commands.sessions[pid]
    await wait_for(lambda: entry.exit_info is not None, "the exit")
    result = await poll(sandbox_env, pid, "too late\n")
    assert result.output == "x\n\n[input not delivered: the process's stdin is closed]"
    assert result.stop_reason == "completed"
    assert pid not in sandbox_env.session.commands.sessions
