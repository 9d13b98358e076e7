"""edit_file: replace an exact substring of a file, atomically, and show the changed hunks.

The diff is built from the known replacement sites rather than by diffing the whole file: only
the lines around each site are compared, so a large file costs one pass, not a quadratic diff.
"""

from __future__ import annotations

import asyncio
import difflib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from envd.channel import RunnerCallError
from envd.tools._files import (
    DIFF_CONTEXT,
    MIB,
    Opcode,
    decode_exact,
    encode_text,
    file_error,
    format_hunk,
    group_opcodes,
    merge_opcodes,
    not_found_text,
    read_bytes,
    real_path,
    resolve_path,
    split_lines,
    write_bytes,
)
from envd.tools.base import (
    Tool,
    ToolContext,
    ToolFailure,
    ToolResult,
    optional_bool,
    require_string,
)

TOOL_NAME = "edit_file"
# Files are edited in memory (old and new text at once); bigger ones are a job for sed.
EDIT_MAX_BYTES = 16 * MIB
MAX_HUNKS = 5
# Replacements laid out for the diff before giving up on it: beyond this, hunks are far past
# the output limit anyway, and the work (about 15 µs each) would risk the call's timeout.
MAX_LAID_OUT = 20_000


@dataclass(frozen=True)
class Site:
    """A run of lines touched by one or more replacements (those sharing a line merge)."""

    old_start: int  # character offsets, at line starts (or the end of the text)
    old_end: int
    new_start: int
    new_end: int
    replacements: int


def find_all(text: str, old: str) -> Iterator[int]:
    """Offsets of the non-overlapping occurrences of ``old``, left to right (as ``str.count``
    and ``str.replace`` see them)."""
    pos = text.find(old)
    while pos >= 0:
        yield pos
        pos = text.find(old, pos + len(old))


def _line_end(text: str, pos: int) -> int:
    newline = text.find("\n", pos)
    return len(text) if newline < 0 else newline + 1


def replacement_sites(text: str, new_text: str, positions: Iterable[int], old_len: int,
                      new_len: int) -> Iterator[Site]:
    """Whole-line spans around each replacement, in both texts. A span ends where both texts
    are at a line start again; outside the spans both texts are the same lines."""
    shift = new_len - old_len
    found = iter(positions)
    pos = next(found, None)
    done = 0  # replacements before ``pos``
    while pos is not None:
        start = text.rfind("\n", 0, pos) + 1
        new_start = start + done * shift
        count = 0
        end = -1
        while True:
            old_end = pos + old_len
            new_end = pos + done * shift + new_len
            count += 1
            done += 1
            pos = next(found, None)
            at_line_start = text[old_end - 1] == "\n" and (
                new_end == 0 or new_text[new_end - 1] == "\n"
            )
            if old_end == len(text) or at_line_start:
                end = old_end
            elif old_end >= end:  # else still before the line's end found for the last one
                end = _line_end(text, old_end)
            if pos is not None and pos < end:
                continue  # the next replacement shares a line with this one
            break
        yield Site(start, end, new_start, new_end + end - old_end, count)


@dataclass(frozen=True)
class EditDiff:
    hunks: list[str]
    hidden_replacements: int  # replacements outside the hunks shown


def edit_diff(text: str, new_text: str, old: str, new: str, *, max_hunks: int = MAX_HUNKS,
              max_work: int = MAX_LAID_OUT) -> EditDiff | None:
    """Unified-diff hunks (3 lines of context) of replacing every ``old`` in ``text`` by ``new``
    (giving ``new_text``), at most ``max_hunks``. Only the sites up to the last hunk shown are
    laid out; None when that takes more than ``max_work`` replacements."""
    a, b = split_lines(text), split_lines(new_text)
    codes: list[Opcode] = []
    firsts: list[tuple[tuple[int, int], int]] = []  # each site's first change, and its count
    a_line = b_line = 0  # line numbers of the previous site's end
    a_pos = b_pos = 0
    clusters = done = 0
    positions = itertools.islice(find_all(text, old), max_work + 1)
    for site in replacement_sites(text, new_text, positions, len(old), len(new)):
        a_next = a_line + text.count("\n", a_pos, site.old_start)
        b_next = b_line + new_text.count("\n", b_pos, site.new_start)
        if not codes or a_next - a_line > 2 * DIFF_CONTEXT:
            clusters += 1  # sites this far apart never share a hunk
            if clusters > max_hunks + 1:
                break  # past what is shown: the rest only counts as hidden
        codes.append(("equal", a_line, a_next, b_line, b_next))
        old_lines = split_lines(text[site.old_start : site.old_end])
        new_lines = split_lines(new_text[site.new_start : site.new_end])
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        site_codes = [(tag, i1 + a_next, i2 + a_next, j1 + b_next, j2 + b_next)
                      for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
        first = next(c for c in site_codes if c[0] != "equal")
        firsts.append(((first[1], first[3]), site.replacements))
        codes.extend(site_codes)
        done += site.replacements
        a_line, b_line = a_next + len(old_lines), b_next + len(new_lines)
        a_pos, b_pos = site.old_end, site.new_end
    else:
        a_next, b_next = len(a), len(b)
    if done > max_work:
        return None
    codes.append(("equal", a_line, a_next, b_line, b_next))
    groups = group_opcodes(merge_opcodes(codes))
    shown = groups[:max_hunks]
    hidden = text.count(old) - done
    if len(groups) > len(shown):
        # Where the shown changes end (adjacent sites may share one merged opcode).
        end = max((c[2], c[4]) for c in shown[-1] if c[0] != "equal")
        hidden += sum(count for first_change, count in firsts if first_change >= end)
    return EditDiff([format_hunk(a, b, group) for group in shown], hidden)


def _check_strings(old: str, new: str) -> None:
    if not old:
        raise ToolFailure(
            "old_string is empty. Give the exact text to replace; to create a file or replace "
            "its whole content, use write_file."
        )
    if old == new:
        raise ToolFailure(
            "old_string and new_string are identical, so the edit would change nothing. Put "
            "the replacement text in new_string."
        )


def _no_match(path: str, text: str) -> ToolFailure:
    message = (
        f'old_string not found in "{path}". Make sure it matches the file content exactly, '
        "including whitespace and indentation."
    )
    if "\r\n" in text:
        message += (
            " The file uses CRLF (\\r\\n) line endings: where old_string spans lines, it must "
            "contain \\r\\n too."
        )
    return ToolFailure(message)


async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    path = resolve_path(args, ctx, TOOL_NAME)
    old = require_string(args, "old_string", TOOL_NAME)
    new = require_string(args, "new_string", TOOL_NAME)
    replace_all = optional_bool(args, "replace_all")
    _check_strings(old, new)
    try:
        found = await read_bytes(ctx, path, EDIT_MAX_BYTES)
    except RunnerCallError as exc:
        raise file_error("edit", path, exc) from None
    if found is None:
        raise ToolFailure(
            await not_found_text(ctx, path, " To create a new file, use write_file.")
        )
    data, truncated = found
    if truncated:
        raise ToolFailure(
            f'"{path}" is too large for edit_file (over {EDIT_MAX_BYTES // MIB} MiB). Use '
            "shell commands (e.g. sed) to change it."
        )
    if b"\0" in data:
        raise ToolFailure(
            f'"{path}" looks like a binary file (contains NUL bytes); edit_file only edits text. '
            "Use shell commands to change it."
        )
    text = decode_exact(data)
    count = text.count(old)
    if count == 0:
        raise _no_match(path, text)
    if count > 1 and not replace_all:
        raise ToolFailure(
            f'old_string occurs {count} times in "{path}". Add surrounding context to make it '
            "unique, or set replace_all to true to replace every occurrence."
        )
    new_text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    try:
        await write_bytes(ctx, await real_path(ctx, path), encode_text(new_text), mkdirs=False)
    except RunnerCallError as exc:
        raise file_error("edit", path, exc) from None

    # CPU-bound on big files: keep it off the event loop that serves every session.
    diff = await asyncio.to_thread(edit_diff, text, new_text, old, new)
    parts = [f'Replaced {count} occurrence(s) in "{path}".']
    if diff is None:
        parts.append(f"(diff not shown: more than {MAX_LAID_OUT} replacements to lay out)")
    else:
        parts.extend(diff.hunks)
        if diff.hidden_replacements:
            parts.append(f"…and {diff.hidden_replacements} more replacements")
    await ctx.emit("\n".join(parts))
    return ToolResult()


TOOL = Tool(
    name=TOOL_NAME,
    description=(
        "Edit a text file in the sandbox by exact string replacement: old_string must match "
        "the file content exactly (whitespace and indentation included) and, unless "
        "replace_all is set, occur exactly once. The file is rewritten atomically, keeping its "
        "permissions. Replies with the changed hunks as a unified diff. Read the file first; "
        "to create a file use write_file."
    ),
    parameters={
        "type": "object",
        "properties": {
            "file_path": {
                "type": "string",
                "description": (
                    "The file to edit: an absolute path, or a path relative to the workspace."
                ),
            },
            "old_string": {
                "type": "string",
                "description": (
                    "The exact text to replace, as it appears in the file (without read_file's "
                    "line-number prefixes). Include enough surrounding lines to make it unique."
                ),
            },
            "new_string": {
                "type": "string",
                "description": "The text to put in its place (must differ from old_string).",
            },
            "replace_all": {
                "type": "boolean",
                "description": (
                    "Replace every occurrence of old_string instead of requiring exactly one "
                    "(default false)."
                ),
            },
        },
        "required": ["file_path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    run=run,
    permission="rw",
    timeout_ms=30_000,
    max_output_length=16_000,
)
