"""write_file: create or replace a whole file, atomically, and show what changed."""

from __future__ import annotations

import asyncio
from typing import Any

from envd.channel import RunnerCallError
from envd.tools._files import (
    MIB,
    count_changes,
    count_lines,
    decode_exact,
    diff_opcodes,
    encode_text,
    file_error,
    format_hunk,
    group_opcodes,
    output_budget,
    read_bytes,
    real_path,
    resolve_path,
    split_lines,
    write_bytes,
)
from envd.tools.base import Tool, ToolContext, ToolResult, require_string

TOOL_NAME = "write_file"
DIFF_MAX_BYTES = 1 * MIB  # larger previous contents are replaced without a diff
# Diffing against a bigger new content takes seconds, and its diff could never be shown.
DIFF_MAX_NEW_BYTES = 8 * MIB
READ_MAX_BYTES = 64 * MIB  # the runner's cap on one read
UNCHANGED = "(content unchanged)"


def summary_line(created: bool, path: str, content: str, size: int) -> str:
    verb = "Created" if created else "Overwrote"
    return f'{verb} "{path}" ({count_lines(content)} lines, {size} bytes).'


def change_report(old: bytes, new: str, room: int | None) -> str:
    """What replacing a previous text content ``old`` (≤ 1 MiB) with ``new`` changed: unified-
    diff hunks, or, when they would not fit in ``room`` characters (the output budget left
    after the summary line; None: unlimited), the count of lines added and removed: a diff the
    frame would cut is of less use than a clear summary."""
    a, b = split_lines(decode_exact(old)), split_lines(new)
    codes = diff_opcodes(a, b)
    hunks = "\n".join(format_hunk(a, b, group) for group in group_opcodes(codes))
    if room is not None and len(hunks) > room:
        added, removed = count_changes(codes)
        return f"+{added}/\u2212{removed} lines vs the previous content (diff too large to show)"
    return hunks


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    path = resolve_path(args, ctx, TOOL_NAME)
    content = require_string(args, "content", TOOL_NAME)
    data = encode_text(content)
    target = await real_path(ctx, path)
    # Enough to compare with the new content, and to diff a previous content ≤ 1 MiB.
    want = min(max(DIFF_MAX_BYTES, len(data)), READ_MAX_BYTES)
    try:
        previous = await read_bytes(ctx, target, want)
    except RunnerCallError as exc:
        raise file_error("write", path, exc) from None

    if previous is not None and previous == (data, False):
        await ctx.emit(f"{summary_line(False, path, content, len(data))}\n{UNCHANGED}")
        return ToolResult()
    try:
        created = await write_bytes(ctx, target, data, mkdirs=True)
    except RunnerCallError as exc:
        raise file_error("write", path, exc) from None

    summary = summary_line(created, path, content, len(data))
    detail = ""
    if not created and previous is not None:
        old, truncated = previous
        if truncated or len(old) > DIFF_MAX_BYTES:
            detail = "(no diff shown: the previous content was larger than 1 MiB)"
        elif len(data) > DIFF_MAX_NEW_BYTES:
            detail = "(no diff shown: the new content is larger than 8 MiB)"
        elif b"\0" in old:
            detail = "(no diff shown: the previous content was binary)"
        else:
            budget = output_budget(ctx)
            room = None if budget is None else budget - len(summary) - 1
            # difflib is CPU-bound: keep it off the event loop that serves every session.
            detail = await asyncio.to_thread(change_report, old, content, room)
    await ctx.emit(f"{summary}\n{detail}" if detail else summary)
    return ToolResult()


TOOL = Tool(
    name=TOOL_NAME,
    description=(
        "Write a whole file in the sandbox: creates it (and any missing parent directories) or "
        "replaces its content, atomically, keeping an existing file's permissions. Replies "
        "with the line and byte counts and, on overwrite, a unified diff against the previous "
        "content. For a small change to an existing file prefer edit_file."
    ),
    parameters={
        "type": "object",
        "properties": {
            "file_path": {
                "type": "string",
                "description": (
                    "The file to write: an absolute path, or a path relative to the workspace."
                ),
            },
            "content": {
                "type": "string",
                "description": (
                    "The complete new content of the file, exactly as it should be saved "
                    "(an empty string makes an empty file)."
                ),
            },
        },
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
    run=run,
    permission="rw",
    timeout_ms=30_000,
    max_output_length=16_000,
)
