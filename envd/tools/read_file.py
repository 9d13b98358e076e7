"""read_file: a text file's lines, ``cat -n`` style, a window at a time.

At most the first 8 MiB are scanned (one bounded read through the runner); lines are located
and decoded on the bytes, so only the shown window becomes text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envd.channel import RunnerCallError
from envd.tools._files import (
    MAX_LINE_CHARS,
    MIB,
    clip_line,
    describe_value,
    file_error,
    not_found_text,
    output_budget,
    read_bytes,
    resolve_path,
    whole_number,
)
from envd.tools.base import Tool, ToolContext, ToolFailure, ToolResult, optional_number

TOOL_NAME = "read_file"
SCAN_CAP = 8 * MIB
DEFAULT_LIMIT = 2000
CRLF_LINE = "(file uses CRLF line endings)"
# Enough bytes to hold MAX_LINE_CHARS + 1 characters whatever the encoding (4 bytes at most each).
_LINE_BYTES = (MAX_LINE_CHARS + 1) * 4
_COUNT_BLOCK = 1 << 16


@dataclass(frozen=True)
class Scan:
    """The scanned lines of a file, as bytes."""

    data: bytes  # whole lines only, unless one line alone exceeds the scan cap
    lines: int  # lines in ``data``
    complete: bool  # the whole file was scanned
    crlf: bool
    # Not even one line ended within the scan cap: ``data`` is the head of that line.
    overlong: bool = False


def scan(data: bytes, truncated: bool) -> Scan:
    overlong = False
    if truncated:
        cut = data.rfind(b"\n")
        if cut >= 0:
            data = data[: cut + 1]  # a partial last line is not shown: it continues past the cap
        else:
            overlong = True
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return Scan(data, lines, not truncated, b"\r\n" in data, overlong)


def line_start(data: bytes, index: int) -> int:
    """Byte offset of 0-based line ``index`` (which must exist), counting newlines blockwise."""
    pos = 0
    remaining = index
    while remaining:
        block = data[pos : pos + _COUNT_BLOCK]
        found = block.count(b"\n")
        if found < remaining:
            remaining -= found
            pos += len(block)
            continue
        for _ in range(remaining):
            pos = data.index(b"\n", pos) + 1
        remaining = 0
    return pos


def render_line(number: int, raw: bytes, crlf: bool) -> str:
    """``cat -n`` style: the number right-aligned in 6 columns, a tab, the content (cut)."""
    if crlf and raw.endswith(b"\r"):
        raw = raw[:-1]
    text = raw[:_LINE_BYTES].decode("utf-8", "replace")
    return f"{number:>6}\t{clip_line(text)}"


def render(scanned: Scan, first: int, limit: int, budget: int | None) -> tuple[list[str], bool]:
    """Rendered lines from 0-based ``first``, at most ``limit``, within ``budget`` characters
    (joined by newlines; at least one line always); and whether the budget stopped it."""
    data = scanned.data
    pos = line_start(data, first)
    out: list[str] = []
    used = 0
    for number in range(first + 1, min(first + limit, scanned.lines) + 1):
        end = data.find(b"\n", pos)
        if end < 0:
            end = len(data)
        line = render_line(number, data[pos:end], scanned.crlf)
        cost = len(line) + (1 if out else 0)
        if budget is not None and out and used + cost > budget:
            return out, True
        out.append(line)
        used += cost
        pos = end + 1
    return out, False


def continuation_note(scanned: Scan, first: int, last: int, budget_hit: bool) -> str | None:
    """The reference's "more remains" note for lines ``first``-``last`` (1-based) shown."""
    if scanned.complete and last >= scanned.lines:
        return None
    if scanned.overlong:
        return None  # one line longer than the scan cap: nothing else is reachable
    total = (
        f"file has {scanned.lines} lines total"
        if scanned.complete
        else f"file has more than {scanned.lines} lines"
    )
    limit = " (output limit reached)" if budget_hit else ""
    return f"[{total}; showing {first}-{last}{limit} — call again with offset to continue]"


def _line_arg(args: dict[str, Any], key: str, default: int) -> int:
    return whole_number(optional_number(args, key), key, args.get(key), default)


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    path = resolve_path(args, ctx, TOOL_NAME)
    offset = max(_line_arg(args, "offset", 1), 1)
    limit = _line_arg(args, "limit", DEFAULT_LIMIT)
    if limit < 1:
        raise ToolFailure(
            f'Invalid "limit": expected a positive number of lines '
            f"(got {describe_value(args.get('limit'))})."
        )
    try:
        found = await read_bytes(ctx, path, SCAN_CAP)
    except RunnerCallError as exc:
        raise file_error("read", path, exc) from None
    if found is None:
        raise ToolFailure(await not_found_text(ctx, path))
    data, truncated = found
    if not data and not truncated:
        await ctx.emit(f'"{path}" is an empty file (0 lines).')
        return ToolResult()
    if b"\0" in data:
        raise ToolFailure(
            f'"{path}" looks like a binary file (contains NUL bytes). Use shell commands to '
            "inspect it, or read_image if it is an image."
        )
    scanned = scan(data, truncated)
    if offset > scanned.lines:
        if scanned.complete:
            raise ToolFailure(
                f'Offset {offset} is past the end of "{path}" ({scanned.lines} lines total).'
            )
        raise ToolFailure(
            f'Offset {offset} is beyond the part of "{path}" that read_file scans (the first '
            f"{SCAN_CAP // MIB} MiB, {scanned.lines} lines). Use shell commands (e.g. sed -n "
            f"'{offset},+99p') to read further."
        )
    lines, budget_hit = render(scanned, offset - 1, limit, output_budget(ctx))
    last = offset + len(lines) - 1
    if scanned.crlf:
        lines.append(CRLF_LINE)
    await ctx.emit("\n".join(lines))
    return ToolResult(note=continuation_note(scanned, offset, last, budget_hit))


TOOL = Tool(
    name=TOOL_NAME,
    description=(
        "Read a text file from the sandbox. Lines come numbered like `cat -n` (number, tab, "
        "content), at most 2000 per call; lines longer than 2000 characters are cut. When more "
        "remains, a closing note says where to continue: call again with offset. Binary files "
        "and directories are refused: use exec_command for those (ls, file, xxd)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "file_path": {
                "type": "string",
                "description": (
                    "The file to read: an absolute path, or a path relative to the workspace."
                ),
            },
            "offset": {
                "type": "number",
                "description": "The 1-based line number to start at (default 1).",
            },
            "limit": {
                "type": "number",
                "description": "The most lines to return (default 2000; must be positive).",
            },
        },
        "required": ["file_path"],
        "additionalProperties": False,
    },
    run=run,
    permission="r",
    timeout_ms=30_000,
    max_output_length=64_000,
)
