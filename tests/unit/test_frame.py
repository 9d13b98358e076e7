"""The execution frame with fake tools: framing, truncation, notes, priorities, timeouts."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, cast

import pytest

from engine import omni
from envd.frame import BoundTool, execute_call
from envd.scratchpad import ARCHIVE_CAP, Scratchpad, archive_name
from envd.tools.base import Tool, ToolContext, ToolError, ToolFailure, ToolResult
from tests.helpers import check_stream

pytestmark = pytest.mark.anyio


def make_tool(run: Any, name: str = "fake", timeout_ms: int = 5000, limit: int = 100) -> BoundTool:
    return BoundTool(Tool(name=name, description="", parameters={}, run=run), timeout_ms, limit)


async def run_frame(
    bound: BoundTool,
    scratch: Scratchpad | None,
    args: str = "{}",
    signal: asyncio.Event | None = None,
    call_id: str = "id-1",
) -> omni.ToolCallOutputPayload:
    def context(b: BoundTool, tool_call_id: str, emit: Any) -> ToolContext:
        return ToolContext(
            tool_name=b.name,
            tool_call_id=tool_call_id,
            workspace="/w",
            scratchpad="/s",
            timeout_ms=b.timeout_ms,
            channel=cast(Any, None),
            commands=cast(Any, None),
            emit=emit,
        )

    call = omni.ToolCallPayload(name=bound.name, arguments=args, tool_call_id=call_id)
    messages = [m async for m in execute_call(call, {bound.name: bound}, context, scratch, signal)]
    check_stream(messages, call_id)
    final = messages[-1].payload
    assert isinstance(final, omni.ToolCallOutputPayload)
    return final


def emitting(*chunks: str, result: ToolResult | None = None) -> Any:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        for chunk in chunks:
            await ctx.emit(chunk)
        return result or ToolResult()

    return run


@pytest.fixture
def scratch(tmp_path: Path) -> Scratchpad:
    return Scratchpad(tmp_path / "scratch", "/model/scratch")


async def test_plain_output(scratch: Scratchpad) -> None:
    final = await run_frame(make_tool(emitting("a", "b")), scratch)
    assert (final.output, final.stop_reason) == ("ab", "completed")


async def test_truncation_marker_index_and_archive(scratch: Scratchpad) -> None:
    text = "x" * 70 + "y" * 70 + "z" * 10
    final = await run_frame(make_tool(emitting(text[:70], text[70:140], text[140:])), scratch)
    name = archive_name("fake", "id-1")
    assert final.output == (
        text[:100] + "\n[output truncated: exceeded 100 chars]\n"
        f"[output archived: /model/scratch/truncated-tool-output/{name}]"
    )
    assert final.output.index("[output truncated") == 101
    archive = scratch.host_dir / "truncated-tool-output" / name
    assert archive.read_text() == text
    assert oct(archive.stat().st_mode & 0o777) == "0o644"


async def test_note_order_and_tool_status(scratch: Scratchpad) -> None:
    final = await run_frame(
        make_tool(
            emitting("y" * 150, result=ToolResult(note="[exit code: 2]", stop_reason="failed"))
        ),
        scratch,
    )
    lines = final.output.split("\n")
    assert lines[1] == "[output truncated: exceeded 100 chars]"
    assert lines[2].startswith("[output archived: ")
    assert lines[3] == "[exit code: 2]"
    assert final.stop_reason == "failed"


async def test_no_output(scratch: Scratchpad) -> None:
    final = await run_frame(make_tool(emitting()), scratch)
    assert (final.output, final.stop_reason) == ("[no output]", "completed")


async def test_note_without_content_has_no_leading_newline(scratch: Scratchpad) -> None:
    final = await run_frame(make_tool(emitting(result=ToolResult(note="[n]"))), scratch)
    assert final.output == "[n]"


async def test_thrown_error_keeps_output(scratch: Scratchpad) -> None:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await ctx.emit("so far")
        raise ToolError("boom")

    final = await run_frame(make_tool(run), scratch)
    assert (final.output, final.stop_reason) == ("so far\n[tool error] boom", "failed")


async def test_unexpected_exception_is_a_tool_error(scratch: Scratchpad) -> None:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise KeyError("k")

    final = await run_frame(make_tool(run), scratch)
    assert final.output == "[tool error] 'k'" and final.stop_reason == "failed"


async def test_tool_failure_text_is_the_output(scratch: Scratchpad) -> None:
    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolFailure("File not found.")

    final = await run_frame(make_tool(run), scratch)
    assert (final.output, final.stop_reason) == ("File not found.", "failed")


async def test_timeout(scratch: Scratchpad) -> None:
    cleaned = asyncio.Event()

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await ctx.emit("started")
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.set()
        return ToolResult()

    final = await run_frame(make_tool(run, timeout_ms=200), scratch)
    assert final.output == "started\n[tool timeout: exceeded 200ms]"
    assert final.stop_reason == "failed" and cleaned.is_set()


async def test_abort_beats_timeout_and_error(scratch: Scratchpad) -> None:
    signal = asyncio.Event()

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        signal.set()
        raise ToolError("also failed")

    final = await run_frame(make_tool(run), scratch, signal=signal)
    assert final.stop_reason == "aborted"
    assert final.output == "[interrupted: tool aborted by user]"


async def test_images_only_on_completed(scratch: Scratchpad) -> None:
    image = "data:image/png;base64,AAAA"
    ok = await run_frame(
        make_tool(emitting("image/png, 1 B", result=ToolResult(images=[image]))), scratch
    )
    assert ok.images == [image]
    failed = await run_frame(
        make_tool(emitting(result=ToolResult(images=[image], stop_reason="failed"))), scratch
    )
    assert failed.images is None


async def test_disabled_limit_streams_everything(scratch: Scratchpad) -> None:
    bound = BoundTool(
        Tool(name="t", description="", parameters={}, run=emitting("a" * 500)), 5000, 0
    )
    final = await run_frame(bound, scratch)
    assert final.output == "a" * 500


async def test_archive_keeps_head_and_tail_past_the_cap(scratch: Scratchpad) -> None:
    chunk = "é" * 700_000  # 1.4 MB a chunk: the cap falls inside a character
    chunks = [chunk] * 8 + ["THE-END"]
    final = await run_frame(make_tool(emitting(*chunks), limit=10), scratch)
    assert "[output archived (8 MiB limit; head and tail kept): /model/scratch/" in final.output
    data = (scratch.host_dir / "truncated-tool-output" / archive_name("fake", "id-1")).read_bytes()
    assert len(data) <= ARCHIVE_CAP
    text = data.decode("utf-8")  # both cuts on character boundaries
    head, tail = text.split("\n[archive middle truncated]\n")
    assert set(head) == {"é"} and tail.endswith("é" * 10 + "THE-END")
    assert len(data) >= ARCHIVE_CAP - 8


async def test_archive_failure_does_not_change_the_status(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the scratchpad directory should be")
    final = await run_frame(make_tool(emitting("z" * 150)), Scratchpad(blocked, "/m"))
    assert final.output.endswith("[output archive failed: ENOTDIR]")
    assert final.stop_reason == "completed"


async def test_scratchpad_quota(tmp_path: Path) -> None:
    scratch = Scratchpad(tmp_path / "s", "/m", quota_bytes=1000)
    final = await run_frame(make_tool(emitting("q" * 5000)), scratch)
    assert final.output.endswith("[output archive failed: scratchpad quota of 1000 bytes reached]")
    assert not any((tmp_path / "s" / "truncated-tool-output").iterdir())
    assert scratch.used_bytes == 0


async def test_archive_file_is_created_exclusively(scratch: Scratchpad) -> None:
    await run_frame(make_tool(emitting("w" * 150)), scratch, call_id="same")
    again = await run_frame(make_tool(emitting("v" * 150)), scratch, call_id="same")
    assert again.output.endswith("[output archive failed: EEXIST]")
    os.sync()
