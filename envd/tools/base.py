"""What a builtin tool is: a definition, and a ``run`` that emits text and returns a result.

A tool only emits content (``await ctx.emit(text)``) and returns a :class:`ToolResult` with its
own note and status. Framing, truncation, archiving, timeouts, abort and error-to-message
conversion all happen in :mod:`envd.frame`, for every tool alike.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from envd.channel import RunnerChannel
    from envd.commands import CommandSessions

Permission = Literal["r", "rw"]
ToolStatus = Literal["completed", "failed"]

DEFAULT_TIMEOUT_MS = 120_000
DEFAULT_MAX_OUTPUT = 16_000

DESCRIPTION_PROPERTY = {
    "type": "string",
    "description": "A few words on what this call does, shown to the user while it runs.",
}


@dataclass
class ToolResult:
    note: str | None = None
    stop_reason: ToolStatus = "completed"
    images: list[str] | None = None


class ToolFailure(Exception):
    """The call failed in a way the tool explains itself: the message is the tool's output."""


class ToolError(Exception):
    """An unexpected failure: reported as ``[tool error] <message>`` after the output so far."""


@dataclass
class ToolContext:
    """Everything a tool may use for one call."""

    tool_name: str
    tool_call_id: str
    workspace: str  # as the model sees it
    scratchpad: str  # as the model sees it
    timeout_ms: int  # effective for this call; <= 0 means none
    channel: RunnerChannel
    commands: CommandSessions
    emit: Callable[[str], Awaitable[None]]
    command_env: Mapping[str, str] = field(default_factory=dict)
    network: bool = False
    # The output limit in force for this call (<= 0: none); tools that size their own output
    # (read_file's budget, write_file's diff) need it.
    max_output_length: int = DEFAULT_MAX_OUTPUT

    def resolve(self, path: str) -> str:
        """A model-given path: absolute as is, relative against the workspace."""
        return path if path.startswith("/") else posixpath.join(self.workspace, path)


Run = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Run
    permission: Permission = "rw"
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_output_length: int = DEFAULT_MAX_OUTPUT


# --- argument helpers (the reference's texts) ------------------------------------------------


def require_string(args: dict[str, Any], key: str, tool: str) -> str:
    if key not in args or args[key] is None:
        raise ToolFailure(f'Missing required argument "{key}" for {tool}.')
    value = args[key]
    if not isinstance(value, str):
        raise ToolFailure(f'Invalid "{key}": expected a string (got {_describe(value)}).')
    return value


def optional_string(args: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = args.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ToolFailure(f'Invalid "{key}": expected a string (got {_describe(value)}).')
    return value


def optional_number(args: dict[str, Any], key: str) -> float | None:
    """A number, or a numeric string; None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise ToolFailure(f'Invalid "{key}": expected a number (got {_describe(value)}).')
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ToolFailure(f'Invalid "{key}": expected a number (got {_describe(value)}).')


def optional_bool(args: dict[str, Any], key: str, default: bool = False) -> bool:
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ToolFailure(f'Invalid "{key}": expected a boolean (got {_describe(value)}).')


def _describe(value: Any) -> str:
    import json

    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
