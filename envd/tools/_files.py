"""What read_file, write_file and edit_file share: paths, runner file I/O with the reference's
failure texts, text decoding and line rendering, and unified-diff hunks.

Every file access goes through the runner, which does it inside the sandbox as the sandbox user:
the daemon never follows a sandbox path on the host.
"""

from __future__ import annotations

import difflib
import json
import math
import posixpath
from collections.abc import Sequence
from typing import Any

from envd.channel import RunnerCallError
from envd.tools.base import ToolContext, ToolFailure, require_string

MIB = 1 << 20
MAX_LINE_CHARS = 2000
LINE_TRUNCATED = "… [line truncated]"
# Room kept below maxOutputLength for the notes a file tool appends to its own output.
NOTE_RESERVE = 256
DIFF_CONTEXT = 3
SIMILAR_LIMIT = 8
PROBE_ENTRIES = 2000
NO_NEWLINE = "\\ No newline at end of file"

# Runner errors meaning "there is no such file" (ENOTDIR: a component of the path is a file).
MISSING_CODES = frozenset({"ENOENT", "ENOTDIR"})

_REASONS = {
    "EISDIR": "it is a directory. Pass the path of a file inside it",
    # The runner's read refuses FIFOs, sockets and devices (EINVAL) instead of blocking on them.
    "EINVAL": "it is not a regular file (a FIFO, socket or device). Use shell commands for it",
    "ENXIO": "it is not a regular file (a FIFO, socket or device). Use shell commands for it",
    "EACCES": "permission denied (the sandbox user has no access to it)",
    "EPERM": "operation not permitted",
    "ELOOP": "too many levels of symbolic links",
    "ENOTDIR": "a component of the path is not a directory",
    "EEXIST": "a component of the path is not a directory",
    "EROFS": "the file system is read-only",
    "ENOSPC": "no space left on the device",
    "EDQUOT": "the disk quota is exceeded",
    "ENAMETOOLONG": "the file name is too long",
}

Opcode = tuple[str, int, int, int, int]


# --- arguments and paths -------------------------------------------------------------------


def resolve_path(args: dict[str, Any], ctx: ToolContext, tool: str) -> str:
    """``file_path`` as an absolute, normalised in-sandbox path (relative: against the workspace),
    the way the reference's ``path.resolve`` spells it."""
    raw = require_string(args, "file_path", tool)
    if not raw.strip():
        raise ToolFailure('Invalid "file_path": expected a non-empty path.')
    if "\0" in raw:
        raise ToolFailure('Invalid "file_path": a path cannot contain NUL characters.')
    return posixpath.normpath(ctx.resolve(raw))


def output_budget(ctx: ToolContext) -> int | None:
    """Characters a tool may use for its content, leaving room for notes; None: no limit."""
    if ctx.max_output_length <= 0:
        return None
    return max(ctx.max_output_length - NOTE_RESERVE, 0)


def describe_value(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def whole_number(value: float | None, key: str, raw: Any, default: int) -> int:
    """A line count or number from ``optional_number``: floored; infinities and NaN refused."""
    if value is None:
        return default
    if not math.isfinite(value):
        raise ToolFailure(f'Invalid "{key}": expected a number (got {describe_value(raw)}).')
    return math.floor(value)


# --- runner file operations ----------------------------------------------------------------


def file_error(verb: str, path: str, exc: RunnerCallError) -> ToolFailure:
    reason = _REASONS.get(exc.code, str(exc) or exc.code)
    return ToolFailure(f'Cannot {verb} "{path}": {reason}.')


async def read_bytes(ctx: ToolContext, path: str, max_bytes: int) -> tuple[bytes, bool] | None:
    """At most ``max_bytes`` of a regular file and whether more follows; None when it does not
    exist. Other refusals raise :class:`RunnerCallError`."""
    try:
        header, data = await ctx.channel.call_with_body("read", path=path, max_bytes=max_bytes)
    except RunnerCallError as exc:
        if exc.code in MISSING_CODES:
            return None
        raise
    return data, bool(header.get("truncated"))


async def real_path(ctx: ToolContext, path: str) -> str:
    """Where a write must go so that a symlink keeps pointing at the (new) content instead of
    being replaced by a regular file."""
    try:
        header = await ctx.channel.call("realpath", path=path)
    except RunnerCallError:
        return path  # a runner that predates the op: write the path itself
    return str(header.get("path") or path)


async def write_bytes(ctx: ToolContext, path: str, data: bytes, *, mkdirs: bool) -> bool:
    """Atomic write (temp file + rename, in the runner), keeping an existing file's mode bits.
    True when the file was created."""
    header = await ctx.channel.call("write", body=data, path=path, mkdirs=mkdirs, mode=0o644)
    return bool(header.get("created"))


async def not_found_text(ctx: ToolContext, path: str, advice: str = "") -> str:
    text = (
        f'File not found: "{path}". Absolute paths are supported; relative paths resolve '
        f"against the workspace ({ctx.workspace}).{advice}"
    )
    try:
        header = await ctx.channel.call("probe", path=path, limit=PROBE_ENTRIES)
    except RunnerCallError:
        return text
    ancestor = str(header.get("ancestor") or "/")
    entries = [str(name) for name in header.get("entries") or []]
    return f"{text}\n{probe_hint(path, ancestor, entries)}"


def probe_hint(path: str, ancestor: str, entries: Sequence[str]) -> str:
    """The deepest existing directory and up to 8 of its entries named like the missing part."""
    relative = posixpath.relpath(path, ancestor) if path != ancestor else ""
    missing = relative.split("/", 1)[0] if relative and not relative.startswith("..") else ""
    names = similar_names(missing, entries) if missing else []
    if not names:
        return f'Deepest existing directory: "{ancestor}" (no similarly named entries).'
    listed = ", ".join(f'"{name}"' for name in names)
    return f'Deepest existing directory: "{ancestor}"; similarly named entries there: {listed}.'


def similar_names(target: str, entries: Sequence[str], limit: int = SIMILAR_LIMIT) -> list[str]:
    """Entries that look like ``target``: close spelling (case-insensitive), or one name
    containing the other's stem (``config`` ~ ``config.yaml``), best first."""
    wanted = target.lower()
    stem = wanted.split(".", 1)[0]
    scored: list[tuple[float, str]] = []
    for name in entries:
        lower = name.lower()
        score = difflib.SequenceMatcher(None, wanted, lower).ratio()
        other = lower.split(".", 1)[0]
        if len(stem) >= 3 and len(other) >= 3 and (stem in lower or other in wanted):
            score = max(score, 0.6)
        if score >= 0.6:
            scored.append((score, name))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [name for _, name in scored[:limit]]


# --- text ----------------------------------------------------------------------------------


def decode_exact(data: bytes) -> str:
    """Decode so that encode_text gives back the very same bytes (invalid UTF-8 survives)."""
    return data.decode("utf-8", "surrogateescape")


def encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate from the model's JSON: not representable
        return text.encode("utf-8", "replace")


def display_text(text: str) -> str:
    """Model-visible text: undecodable bytes shown as U+FFFD."""
    if text.isascii():
        return text
    return encode_text(text).decode("utf-8", "replace")


def clip_line(line: str) -> str:
    if len(line) > MAX_LINE_CHARS:
        return line[:MAX_LINE_CHARS] + LINE_TRUNCATED
    return line


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` ends a line (unlike ``str.splitlines``)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def count_lines(text: str) -> int:
    """Lines as an editor counts them: a last line without ``\\n`` counts, ``""`` has none."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


# --- unified diffs -------------------------------------------------------------------------


def diff_opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """Line opcodes from ``a`` to ``b``. The common head and tail are split off first: edits are
    usually local, and difflib then only works on the part that changed."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    a_mid, b_mid = a[head : len(a) - tail], b[head : len(b) - tail]
    codes: list[Opcode] = [("equal", 0, head, 0, head)]
    # difflib's "popular line" heuristic only pays off (in time) on large inputs.
    small = len(a_mid) <= 2000 and len(b_mid) <= 2000
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=not small)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    codes.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return merge_opcodes(codes)


def merge_opcodes(codes: Sequence[Opcode]) -> list[Opcode]:
    """Drop empty ranges and join neighbours with the same tag."""
    merged: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if i1 == i2 and j1 == j2:
            continue
        if merged and merged[-1][0] == tag:
            prev = merged[-1]
            merged[-1] = (tag, prev[1], i2, prev[3], j2)
        else:
            merged.append((tag, i1, i2, j1, j2))
    return merged


def count_changes(codes: Sequence[Opcode]) -> tuple[int, int]:
    """(lines added, lines removed)."""
    added = sum(j2 - j1 for tag, _, _, j1, j2 in codes if tag != "equal")
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in codes if tag != "equal")
    return added, removed


def group_opcodes(codes: Sequence[Opcode], context: int = DIFF_CONTEXT) -> list[list[Opcode]]:
    """Hunks: the changes with ``context`` lines around them; changes closer than twice that
    share a hunk (difflib's ``get_grouped_opcodes``, on opcodes computed elsewhere)."""
    ops = list(codes)
    if not ops or all(tag == "equal" for tag, *_ in ops):
        return []
    if ops[0][0] == "equal":
        tag, i1, i2, j1, j2 = ops[0]
        ops[0] = (tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    if ops[-1][0] == "equal":
        tag, i1, i2, j1, j2 = ops[-1]
        ops[-1] = (tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    groups: list[list[Opcode]] = []
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return [g for g in groups if any(tag != "equal" for tag, *_ in g)]


def format_hunk(a: Sequence[str], b: Sequence[str], group: Sequence[Opcode]) -> str:
    """One hunk: ``@@ -a,b +c,d @@`` (counts always given; an empty range starts one line
    lower, as in ``diff -u``), then the lines marked ``' '``, ``-`` or ``+``."""
    a_start, a_len = group[0][1], group[-1][2] - group[0][1]
    b_start, b_len = group[0][3], group[-1][4] - group[0][3]
    out = [f"@@ -{a_start + 1 if a_len else a_start},{a_len} "
           f"+{b_start + 1 if b_len else b_start},{b_len} @@"]
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            out.extend(_diff_lines(" ", a[i1:i2]))
            continue
        out.extend(_diff_lines("-", a[i1:i2]))
        out.extend(_diff_lines("+", b[j1:j2]))
    return "\n".join(out)


def _diff_lines(mark: str, lines: Sequence[str]) -> list[str]:
    out = []
    for line in lines:
        body = line[:-1] if line.endswith("\n") else line
        if line.endswith("\r\n"):
            body = body[:-1]
        out.append(mark + clip_line(display_text(body)))
        if not line.endswith("\n"):
            out.append(NO_NEWLINE)
    return out
