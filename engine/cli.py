"""``engine run``: one agent task against a remote envd, rendered live in the terminal.

    engine run --envd 127.0.0.1:50051 --token-file /var/lib/envd/token \\
        --model gpt-4.1 "Make the tests in this repo pass"
    engine run --envd … --script turns.json --approve all --trace run.jsonl "demo"

A new envd session is created for the run and closed at the end. Tool calls are approved
interactively unless ``--approve all`` (or ``none``: deny everything). Ctrl-C interrupts the
task (the engine aborts running tools and stops); a second Ctrl-C exits at once.
Exit status: 0 done, 1 the model request failed (or credentials were rejected), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal as signals
import sys
import threading
from pathlib import Path
from typing import TextIO

from engine import omni
from engine.client import TlsOptions
from engine.interface import ApprovalDecision, ApproveFn
from engine.llm import LLMInterface
from engine.loop import AgentSession
from engine.models.openai_compat import OpenAICompatConfig, OpenAICompatModel
from engine.models.scripted import ScriptedModel
from engine.omni import OmniMessage, SessionMetaPayload
from engine.remote import RemoteEnvironment
from engine.trace import TraceWriter

DEFAULT_SYSTEM_PROMPT = (
    "You are a software engineering agent. You work in a sandboxed Linux workspace at "
    "{workspace}; use the tools to read and change files and to run commands there. "
    "Work step by step, check your changes by running them, and finish with a short summary."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engine", description="An agent loop driving envd.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one task in a new envd session")
    run.add_argument("prompt", help="the task")
    run.add_argument("--envd", required=True, metavar="TARGET", help="envd address, host:port")
    run.add_argument("--token", help="envd bearer token (default: $ENVD_TOKEN)")
    run.add_argument("--token-file", type=Path, help="read the envd token from this file")
    run.add_argument("--ca", type=Path, help="CA certificate: talk TLS to envd")
    model = run.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", help="model id at an OpenAI-compatible endpoint")
    model.add_argument("--script", type=Path, help="replay a scripted model (JSON turns)")
    run.add_argument("--base-url", help="OpenAI-compatible base URL (default: $OPENAI_BASE_URL)")
    run.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY)")
    run.add_argument("--system", help="system prompt ({workspace} is substituted)")
    run.add_argument("--thinking", help="reasoning effort: none, low, medium, high, xhigh")
    run.add_argument("--max-tokens", type=int, help="output token cap per request")
    run.add_argument("--approve", choices=("ask", "all", "none"), default="ask",
                     help="tool approval: ask for each call (default), allow all, deny all")
    run.add_argument("--trace", type=Path, help="write the session trace (JSONL) to this file")
    run.add_argument("--json", action="store_true",
                     help="print the raw OmniMessage stream as JSON lines instead")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        code = asyncio.run(run_command(args))
    except (KeyboardInterrupt, asyncio.CancelledError):  # a second Ctrl-C
        code = 130
    sys.exit(code)


async def run_command(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("ENVD_TOKEN")
    if token is None and args.token_file is not None:
        token = args.token_file.read_text().strip()
    tls = TlsOptions(ca_cert=args.ca) if args.ca else None
    try:
        env = await RemoteEnvironment.create(args.envd, token=token, tls=tls,
                                             labels={"client": "engine-cli"})
    except Exception as exc:
        print(f"engine: cannot create an envd session at {args.envd}: {exc}", file=sys.stderr)
        return 1
    trace: TraceWriter | None = None
    session: AgentSession | None = None
    llm: LLMInterface | None = None
    try:
        info = await env.client.get_session(env.session_id)
        workspace = info.workspace or "/workspace"
        tools = await env.list_tools()
        system_prompt = (args.system or DEFAULT_SYSTEM_PROMPT).replace("{workspace}", workspace)
        if args.script is not None:
            llm, provider, model_id = ScriptedModel.from_file(args.script), "scripted", "script"
        else:
            llm = OpenAICompatModel(OpenAICompatConfig(
                model=args.model, base_url=args.base_url, api_key=args.api_key,
                system_prompt=system_prompt, tools=tools, max_tokens=args.max_tokens,
                thinking_level=args.thinking))
            provider, model_id = "openai-compatible", args.model
        if args.trace is not None:
            trace = TraceWriter(args.trace, SessionMetaPayload(
                session_id=env.session_id, provider=provider, model_id=model_id,
                model_context_window="unknown", system_prompt=system_prompt, tools=tools,
                agent_state="", workspace=workspace))
        session = AgentSession(llm, env, trace)
        renderer = Renderer(sys.stdout, color=sys.stdout.isatty(), raw=args.json)
        approve = approver(args.approve, renderer)
        interrupt = asyncio.Event()
        _on_ctrl_c(interrupt)
        status = "completed"
        async for message in session.run([omni.user_text(args.prompt)], approve=approve,
                                         signal=interrupt, thinking_level=args.thinking):
            renderer.show(message)
            if isinstance(message.payload, omni.RequestEndPayload):
                status = message.payload.status
            elif isinstance(message.payload, omni.AbortPayload):
                status = "aborted"
        renderer.end()
        return 0 if status == "completed" else 130 if status == "aborted" else 1
    finally:
        with contextlib.suppress(Exception):
            loop = asyncio.get_running_loop()
            loop.remove_signal_handler(signals.SIGINT)
        if session is not None:
            await session.aclose()
        if trace is not None:
            trace.close()
        if isinstance(llm, OpenAICompatModel):
            await llm.aclose()
        await env.dispose()


def _on_ctrl_c(interrupt: asyncio.Event) -> None:
    """First Ctrl-C interrupts the task; the second cancels the whole command."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()

    def handle() -> None:
        if interrupt.is_set() and task is not None:
            task.cancel()
        interrupt.set()

    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals (not main thread)
        loop.add_signal_handler(signals.SIGINT, handle)


# --- approval ------------------------------------------------------------------------------------


def approver(mode: str, renderer: Renderer) -> ApproveFn | None:
    if mode == "none":
        return None
    if mode == "all":
        async def allow_all(_: OmniMessage) -> ApprovalDecision:
            return "allow"
        return allow_all
    always: set[str] = set()

    async def ask(tool_call: OmniMessage) -> ApprovalDecision:
        name = str(getattr(tool_call.payload, "name", ""))
        if name in always:
            return "allow"
        renderer.end_line()
        answer = (await _read_line(f"allow {name}? [y]es, [n]o, [a]lways {name}: ")).strip()
        if answer.lower().startswith("a"):
            always.add(name)
            return "allow"
        return "allow" if answer.lower().startswith("y") else "deny"

    return ask


async def _read_line(prompt: str) -> str:
    """input() on a daemon thread: an interrupted run must not wait for the user's Enter."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def read() -> None:
        try:
            sys.stderr.write(prompt)
            sys.stderr.flush()
            line = sys.stdin.readline()
        except Exception:  # stdin closed or unreadable: deny
            line = ""
        def deliver() -> None:
            if not answer.done():
                answer.set_result(line)

        loop.call_soon_threadsafe(deliver)

    threading.Thread(target=read, daemon=True).start()
    return await answer


# --- rendering -----------------------------------------------------------------------------------


class Renderer:
    """Thinking (dimmed), text as it streams, each tool call with its output (outputs of
    concurrent calls interleave: a header line marks each switch)."""

    def __init__(self, out: TextIO, color: bool = False, raw: bool = False) -> None:
        self.out = out
        self.color = color
        self.raw = raw
        self._names: dict[str, str] = {}
        self._streaming: str | None = None  # tool_call_id whose output is being written
        self._at_line_start = True

    def show(self, message: OmniMessage) -> None:
        if self.raw:
            self.out.write(omni.to_json(message) + "\n")
            self.out.flush()
            return
        if message.origin:
            return
        p = message.payload
        if isinstance(p, omni.PartialThinkingPayload):
            if p.event_type == "delta":
                self._write(self._dim(p.thinking))
            elif p.event_type == "stop":
                self.end_line()
        elif isinstance(p, omni.PartialTextPayload):
            if p.event_type == "delta":
                self._write(p.text)
            elif p.event_type == "stop":
                self.end_line()
        elif isinstance(p, omni.ToolCallPayload):
            self._names[p.tool_call_id] = p.name
            self._line(self._bold(f"→ {p.name}") + " " + _summarize(p.arguments))
        elif isinstance(p, omni.ApprovalDecisionPayload) and p.decision == "deny":
            self._line(self._dim(f"  ✗ {self._names.get(p.tool_call_id, '')} denied"))
        elif isinstance(p, omni.PartialToolCallOutputPayload) and p.event_type == "delta":
            if self._streaming != p.tool_call_id:
                self._line(self._dim(f"  ┌ {self._names.get(p.tool_call_id, 'tool')} "
                                     f"[{p.tool_call_id}]"))
                self._streaming = p.tool_call_id
            for piece in p.output.splitlines(keepends=True):
                self._write(("  │ " if self._at_line_start else "") + piece)
        elif isinstance(p, omni.ToolCallOutputPayload):
            if self._streaming == p.tool_call_id:
                self._streaming = None
            if p.stop_reason not in (None, "completed"):
                self._line(self._dim(f"  └ {self._names.get(p.tool_call_id, 'tool')} "
                                     f"{p.stop_reason}"))
            else:
                self.end_line()
        elif isinstance(p, omni.RequestEndPayload) and p.status != "completed":
            detail = f": {p.message}" if p.message else ""
            self._line(self._dim(f"[model request {p.status}{detail}]"))
        elif isinstance(p, omni.AbortPayload):
            self._line("[interrupted]")
        elif isinstance(p, omni.TextPayload) and p.role == "user":
            # A background completion report: its summary line and the end of its output.
            lines = p.text.splitlines()
            start = next((i for i, ln in enumerate(lines) if ln.startswith("Background ")), 0)
            self._line(self._dim(f"[background] {lines[start] if lines else ''}"))
            for line in lines[start + 1:][-5:]:
                self._line(self._dim(f"  │ {line}"))

    def end(self) -> None:
        self.end_line()
        self.out.flush()

    def end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _line(self, text: str) -> None:
        self.end_line()
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self._at_line_start = text.endswith("\n")

    def _dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color and text else text

    def _bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color else text


def _summarize(arguments: str, limit: int = 300) -> str:
    try:
        args = json.loads(arguments)
    except ValueError:
        args = None
    text = arguments
    if isinstance(args, dict) and isinstance(args.get("cmd"), str):
        text = "$ " + str(args["cmd"])
    elif isinstance(args, dict) and isinstance(args.get("file_path"), str):
        text = str(args["file_path"])
    return text if len(text) <= limit else text[:limit] + "…"


if __name__ == "__main__":
    main()
