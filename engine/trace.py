"""The session trace: one JSONL file per session, and replaying it into a model context.

Line one is ``session_meta``; then every complete model message and every event, in the order
they were streamed. Partials and ``origin``-tagged messages (a child session's, which has its
own trace) are never written. :func:`replay` rebuilds the model context from the lines with the
seed's commit criterion: messages produced inside a model request count only when that request's
``request_end`` is ``completed``; input messages (prompts, tool outputs, background reports) are
written outside requests and always count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO

from engine import omni
from engine.omni import OmniMessage, SessionMetaPayload

INTERRUPTED_NOTE = "[interrupted: tool aborted by user]"


class TraceError(ValueError):
    """Raised by :func:`load` and :class:`TraceWriter` for a file that is not a trace."""


def recordable(message: OmniMessage) -> bool:
    """Whether ``message`` belongs in a trace."""
    return not message.origin and not omni.is_partial_payload(message)


class TraceWriter:
    """Appends messages to a trace file, flushing each line so a crash loses at most one.

    ``TraceWriter(path, meta)`` starts a new trace (the file must not exist);
    ``TraceWriter(path)`` appends to an existing one (resuming a session)."""

    def __init__(self, path: str | Path, meta: SessionMetaPayload | None = None) -> None:
        self.path = Path(path)
        self._file: IO[str] | None
        if meta is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("x", encoding="utf-8")
            self._write_line(omni.session_meta(meta))
        else:
            load(self.path)  # refuse to append to something that is not a trace
            _drop_torn_tail(self.path)
            self._file = self.path.open("a", encoding="utf-8")

    def write(self, message: OmniMessage) -> None:
        if recordable(message) and not omni.is_session_meta(message):
            self._write_line(message)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write_line(self, message: OmniMessage) -> None:
        if self._file is None:
            raise TraceError(f"{self.path}: trace writer is closed")
        # Small, line-sized appends: cheap enough not to need a thread.
        self._file.write(omni.to_json(message) + "\n")
        self._file.flush()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line that a crash left without its newline, so appending stays valid."""
    with path.open("rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


@dataclass
class Trace:
    meta: SessionMetaPayload
    messages: list[OmniMessage]  # everything after session_meta, in file order

    def context(self) -> list[OmniMessage]:
        return replay(self.messages)


def load(path: str | Path) -> Trace:
    """Read a trace. A torn last line (a crash mid-write) is ignored; any other bad line is an
    error."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    messages: list[OmniMessage] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            messages.append(omni.parse(line))
        except omni.OmniMessageError as exc:
            if number == len(lines):
                break
            raise TraceError(f"{path}:{number}: {exc}") from exc
    if not messages or not omni.is_session_meta(messages[0]):
        raise TraceError(f"{path}: a trace starts with session_meta")
    meta = messages[0].payload
    assert isinstance(meta, SessionMetaPayload)
    return Trace(meta, messages[1:])


def replay(messages: list[OmniMessage], repair: bool = True) -> list[OmniMessage]:
    """The model context the traced messages amount to (complete model messages, in order).

    Tool outputs are written in completion order but re-fed to the model in call order, so each
    batch is put back in the order of the committed calls. With ``repair``, a committed call that
    never got an output (the process died mid-tool) gets an ``aborted`` placeholder, so the
    context stays valid for providers that pair calls and results strictly."""
    context: list[OmniMessage] = []
    request: list[OmniMessage] | None = None
    calls: list[str] = []  # tool_call_ids of the last committed request, in call order
    batch: dict[str, OmniMessage] = {}

    def settle_batch() -> None:
        for call_id in calls:
            if call_id in batch:
                context.append(batch.pop(call_id))
            elif repair:
                context.append(omni.tool_call_output(call_id, INTERRUPTED_NOTE, "aborted"))
        context.extend(batch.values())  # outputs of calls we do not know, as written
        calls.clear()
        batch.clear()

    for message in messages:
        if not recordable(message) or omni.is_session_meta(message):
            continue
        payload = message.payload
        if isinstance(payload, omni.RequestBeginPayload):
            settle_batch()
            request = []
        elif isinstance(payload, omni.RequestEndPayload):
            if request is not None and payload.status == "completed":
                context.extend(request)
                calls[:] = [m.payload.tool_call_id for m in request
                            if isinstance(m.payload, omni.ToolCallPayload)]
            request = None
        elif not omni.is_complete_model_message(message):
            continue
        elif request is not None:
            request.append(message)
        elif isinstance(payload, omni.ToolCallOutputPayload):
            batch[payload.tool_call_id] = message
        else:
            settle_batch()
            context.append(message)
    settle_batch()
    return context
