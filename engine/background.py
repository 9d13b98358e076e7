"""Background command completions, as the engine tells the model about them (reference §4).

envd reports a finished ``run_in_background`` command on ``WatchSession``; the engine injects a
user text message beginning with ``[background_task_done]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine import omni
from engine.omni import OmniMessage

TAIL_LIMIT = 4000
TAIL_DROPPED = "[earlier output dropped: exceeded 4000 chars]"


@dataclass(frozen=True)
class CommandCompletion:
    process_id: str
    command: str
    status: str  # "completed" or "failed"
    exit_code: int  # -1 when killed by a signal
    detail: str  # "exit code 3", "terminated by signal SIGKILL", or ""
    output_tail: str
    tail_truncated: bool = False


def format_report(done: CommandCompletion) -> str:
    lines = [
        "[background_task_done]",
        "kind: command",
        f"id: {done.process_id}",
        f"status: {done.status}",
    ]
    if done.detail:
        lines.append(f"detail: {done.detail}")
    lines += ["[/background_task_done]", ""]
    outcome = "finished" if done.status == "completed" else f"failed ({done.detail or 'error'})"
    lines.append(f"Background command {done.process_id} ({done.command}) {outcome}. "
                 + ("Last output:" if done.output_tail else "It produced no output."))
    tail = done.output_tail
    truncated = done.tail_truncated
    if len(tail) > TAIL_LIMIT:
        tail = tail[-TAIL_LIMIT:]
        truncated = True
    if tail:
        lines.append((TAIL_DROPPED + "\n" if truncated else "") + tail)
    return "\n".join(lines)


def report_message(done: CommandCompletion) -> OmniMessage:
    """The user message the engine injects into the model context."""
    return omni.user_text(format_report(done))
