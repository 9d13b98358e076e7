"""envctl: envd for people. Sessions, commands, any tool, file copies and events, over gRPC.

    envctl session create|ls|show|rm     envctl exec SESSION -- CMD...
    envctl tool SESSION NAME [JSON]      envctl tools SESSION
    envctl cp SRC DST                    envctl events SESSION

Target, token and TLS come from flags or ENVD_TARGET, ENVD_TOKEN / ENVD_TOKEN_FILE, ENVD_CA.
Command output goes to stdout as it streams; envctl's own messages go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import grpc
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Column, Table

from engine.client import EnvdClient, TlsOptions
from envd.runner.transfer import Refused
from envd.v1 import environment_pb2 as pb

# Piped output keeps whole lines (scripts grep it); a terminal gets fitted tables.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 4096)
err = Console(stderr=True, highlight=False, soft_wrap=True)

# Exit codes of envctl itself (a command's own exit code passes through).
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_EXIT_NOTE = re.compile(r"^\[exit code: (-?\d+)\]$", re.M)
_SIGNAL_NOTE = re.compile(r"^\[terminated by signal (SIG[A-Z0-9+]+)", re.M)
_RUNNING_NOTE = re.compile(r"^\[process (?:still )?running with process_id (\S+?)[;\]]", re.M)
_NOTES = re.compile(r"\n?\[[^\n]*(\n\[[^\n]*)*")
# The notes a completed call can end with: truncation, a command left running, no output.
_COMPLETED_NOTE = re.compile(
    r"\[(output truncated|output archive|process running with|process still running with|"
    r"command running in background|no output)"
)
_STATES = {
    pb.SESSION_STATE_STARTING: "starting",
    pb.SESSION_STATE_RUNNING: "running",
    pb.SESSION_STATE_BROKEN: "broken",
    pb.SESSION_STATE_CLOSED: "closed",
}


@dataclass
class Settings:
    target: str
    token: str | None
    ca: Path | None
    server_name: str | None

    def client(self) -> EnvdClient:
        tls = TlsOptions(ca_cert=self.ca, server_name=self.server_name) if self.ca else None
        return EnvdClient(self.target, self.token, tls)


def _run(settings: Settings, body: Callable[[EnvdClient], Awaitable[int | None]]) -> None:
    """Run one command's coroutine; gRPC errors become one line on stderr and exit code 1."""

    async def main() -> int | None:
        client = settings.client()
        try:
            return await body(client)
        finally:
            await client.close()

    try:
        code = asyncio.run(main())
    except grpc.aio.AioRpcError as exc:
        err.print(f"[red]envctl:[/] {exc.code().name}: {exc.details()}", markup=True)
        sys.exit(EXIT_FAILED)
    except (Refused, OSError) as exc:
        err.print(f"[red]envctl:[/] {exc}", markup=True)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or 0)


def _as_dict(message: Message) -> dict[str, Any]:
    found: dict[str, Any] = MessageToDict(message, preserving_proto_field_name=True)
    return found


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _pairs(values: tuple[str, ...], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, not {value!r}", param_hint=what)
        pairs[key] = val
    return pairs


def _integer(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(f"expected a whole number, not {text!r}",
                                 param_hint=what) from None


pass_settings = click.make_pass_decorator(Settings)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--target", envvar="ENVD_TARGET", default="127.0.0.1:50051", show_default=True,
              help="envd address HOST:PORT (ENVD_TARGET).")
@click.option("--token", envvar="ENVD_TOKEN", help="Bearer token (ENVD_TOKEN).")
@click.option("--token-file", envvar="ENVD_TOKEN_FILE", type=click.Path(dir_okay=False),
              help="File holding the bearer token (ENVD_TOKEN_FILE).")
@click.option("--ca", envvar="ENVD_CA", type=click.Path(exists=True, dir_okay=False),
              help="CA certificate of the daemon: connect with TLS (ENVD_CA).")
@click.option("--server-name", help="TLS server name, when it differs from the target host.")
@click.pass_context
def app(ctx: click.Context, target: str, token: str | None, token_file: str | None,
        ca: str | None, server_name: str | None) -> None:
    """envctl: sessions, commands, tools and files of an envd daemon."""
    if token is None and token_file:
        token = Path(token_file).read_text().strip()
    ctx.obj = Settings(target, token, Path(ca) if ca else None, server_name)


# --- sessions ------------------------------------------------------------------------------


@app.group()
def session() -> None:
    """Create, list, show and close sessions."""


@session.command("create")
@click.option("--image", default="", help="Sandbox image (default: the daemon's).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE")
@click.option("--env", "env_defaults", multiple=True, metavar="KEY=VALUE",
              help="Environment default for commands (visible in the session).")
@click.option("--secret", "secrets", multiple=True, metavar="KEY=VALUE",
              help="Vault secret: only in command environments, masked in output.")
@click.option("--network", type=click.Choice(["none", "bridge"]), default="none",
              show_default=True)
@click.option("--isolation", type=click.Choice(["runc", "gvisor"]), default="runc",
              show_default=True)
@click.option("--idle-ttl", type=int, default=0, help="Close after this many idle seconds.")
@click.option("--timeout", "timeouts", multiple=True, metavar="TOOL=MS",
              help="Per-tool call timeout in milliseconds (<= 0: none).")
@click.option("--memory", type=int, default=0, help="Memory limit in bytes.")
@click.option("--cpus", type=float, default=0.0, help="CPU quota.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole session as JSON.")
@pass_settings
def session_create(settings: Settings, image: str, labels: tuple[str, ...],
                   env_defaults: tuple[str, ...], secrets: tuple[str, ...], network: str,
                   isolation: str, idle_ttl: int, timeouts: tuple[str, ...], memory: int,
                   cpus: float, as_json: bool) -> None:
    """Start a sandbox; prints its session id."""
    request = dict(
        image=image, labels=_pairs(labels, "--label"), env=_pairs(secrets, "--secret"),
        env_defaults=_pairs(env_defaults, "--env"), network=network, isolation=isolation,
        idle_ttl_seconds=idle_ttl, limits=pb.ResourceLimits(memory_bytes=memory, cpus=cpus),
        tools={name: pb.ToolOverride(timeout_ms=_integer(ms, "--timeout"))
               for name, ms in _pairs(timeouts, "--timeout").items()},
    )

    async def body(client: EnvdClient) -> None:
        created = await client.create_session(**request)
        if as_json:
            _print_json(_as_dict(created))
        else:
            click.echo(created.session_id)

    _run(settings, body)


@session.command("ls")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="Only sessions with this label.")
@click.option("--json", "as_json", is_flag=True)
@pass_settings
def session_ls(settings: Settings, labels: tuple[str, ...], as_json: bool) -> None:
    """List your sessions."""

    async def body(client: EnvdClient) -> None:
        sessions = await client.list_sessions(_pairs(labels, "--label"))
        if as_json:
            _print_json([_as_dict(s) for s in sessions])
            return
        table = Table(box=None, header_style="bold")
        table.add_column("SESSION", no_wrap=True, min_width=22)
        for column in ("STATE", "IMAGE", "CREATED", "LAST USED", "CALLS", "LABELS"):
            table.add_column(column)
        for s in sessions:
            table.add_row(s.session_id, _STATES.get(s.state, "?"), s.image, s.created_at,
                          s.last_used_at, str(s.running_calls),
                          ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())))
        out.print(table)
        if not sessions:
            err.print("no sessions")

    _run(settings, body)


@session.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True)
@pass_settings
def session_show(settings: Settings, session_id: str, as_json: bool) -> None:
    """Show one session."""

    async def body(client: EnvdClient) -> None:
        found = _as_dict(await client.get_session(session_id))
        if as_json:
            _print_json(found)
            return
        table = Table(box=None, show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for key, value in found.items():
            if key == "state":
                value = str(value).removeprefix("SESSION_STATE_").lower()
            shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            table.add_row(key, shown)
        out.print(table)

    _run(settings, body)


@session.command("rm")
@click.argument("session_ids", nargs=-1, required=True)
@pass_settings
def session_rm(settings: Settings, session_ids: tuple[str, ...]) -> None:
    """Close sessions: their containers and volumes are removed."""

    async def body(client: EnvdClient) -> None:
        for session_id in session_ids:
            closed = await client.close_session(session_id)
            click.echo(f"{session_id} {'closed' if closed else 'was already closed'}")

    _run(settings, body)


# --- tools ---------------------------------------------------------------------------------


@dataclass
class CallOutcome:
    stop_reason: str
    notes: str  # the frame's trailing notes ("[exit code: 3]" ...), not part of the output


class _Printer:
    """Streams deltas to stdout, holding the latest back: the frame sends its notes as the
    last delta before "stop", and ``exec`` shows those on stderr instead."""

    def __init__(self, split_notes: bool) -> None:
        self.split_notes = split_notes
        self.pending = ""
        self.last = "\n"

    def write(self, text: str) -> None:
        if text:
            self.last = text[-1]
            _write(text)

    def delta(self, text: str) -> None:
        if not self.split_notes:
            self.write(text)
            return
        self.write(self.pending)
        self.pending = text

    def stop(self, reason: str) -> str:
        text, self.pending = self.pending, ""
        # A failed or aborted command ends with notes; a completed one only with a few kinds.
        if text and _NOTES.fullmatch(text) and (reason != "completed" or all(
            _COMPLETED_NOTE.match(line) for line in text.lstrip("\n").splitlines()
        )):
            return text.lstrip("\n")
        self.write(text)
        return ""


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()


async def _call(client: EnvdClient, session_id: str, name: str, arguments: str,
                printer: _Printer, as_json: bool = False) -> CallOutcome:
    """One tool call, streamed; Ctrl-C cancels it (the stream then ends "aborted")."""
    call_id = f"envctl-{uuid.uuid4().hex[:12]}"
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
    canceller = asyncio.create_task(_cancel_on(interrupted, client, session_id, call_id))
    reason, notes = "failed", ""
    try:
        async for wire in client.execute(session_id, name, arguments, call_id):
            if as_json:
                click.echo(json.dumps(_as_dict(wire), ensure_ascii=False))
            kind = wire.WhichOneof("payload")
            if kind == "partial_tool_call_output":
                partial = wire.partial_tool_call_output
                if partial.event_type == "delta" and not as_json:
                    printer.delta(partial.output)
                    if partial.images:
                        err.print(f"[{len(partial.images)} image(s) not shown]")
                elif partial.event_type == "stop":
                    reason = partial.stop_reason
                    notes = "" if as_json else printer.stop(reason)
            elif kind == "tool_call_output":
                reason = wire.tool_call_output.stop_reason or reason
    finally:
        canceller.cancel()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    if interrupted.is_set():
        reason = "aborted"
    return CallOutcome(reason, notes)


async def _cancel_on(event: asyncio.Event, client: EnvdClient, session_id: str,
                     call_id: str) -> None:
    await event.wait()
    err.print("\ninterrupted: cancelling the call")
    await client.cancel(session_id, call_id)


def exit_code(outcome: CallOutcome) -> int:
    """The command's own exit code from the notes: N, 128+signal, 130 when interrupted,
    1 for any other failure."""
    if outcome.stop_reason == "completed":
        return 0
    if outcome.stop_reason == "aborted":
        return EXIT_INTERRUPTED
    if match := _EXIT_NOTE.search(outcome.notes):
        return int(match.group(1)) & 0xFF or EXIT_FAILED
    if match := _SIGNAL_NOTE.search(outcome.notes):
        with contextlib.suppress(KeyError):
            return 128 + int(signal.Signals[match.group(1)])
    return EXIT_FAILED


def _show_notes(notes: str) -> None:
    shown = "\n".join(line for line in notes.splitlines()
                      if line and line != "[no output]" and not _EXIT_NOTE.match(line))
    if shown:
        err.print(shown, style="dim", markup=False)


@app.command("exec", context_settings={"ignore_unknown_options": True,
                                       "allow_interspersed_args": False})
@click.argument("session_id")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--workdir", "-w", help="Working directory (relative: to the workspace).")
@pass_settings
def exec_command(settings: Settings, session_id: str, command: tuple[str, ...],
                 workdir: str | None) -> None:
    """Run a command (bash -lc) in the sandbox, streaming its output; exits with its exit code.

    One argument is taken as shell text (envctl exec S 'ls | wc -l'); several are quoted as
    words (envctl exec S -- sh -c 'echo hi; exit 7')."""
    if command[:1] == ("--",):
        command = command[1:]
    if not command:
        raise click.UsageError("no command given")
    cmd = command[0] if len(command) == 1 else shlex.join(command)
    args: dict[str, Any] = {"cmd": cmd}
    if workdir:
        args["workdir"] = workdir

    async def body(client: EnvdClient) -> int:
        outcome = await _call(client, session_id, "exec_command", json.dumps(args),
                              _Printer(split_notes=True))
        # Still running after the yield window: it became a command session; follow it.
        while outcome.stop_reason == "completed" and (
            running := _RUNNING_NOTE.search(outcome.notes)
        ):
            poll = json.dumps({"process_id": running.group(1)})
            outcome = await _call(client, session_id, "input_command", poll,
                                  _Printer(split_notes=True))
            if outcome.stop_reason == "aborted":
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await _call(client, session_id, "kill_command", poll, _Printer(False))
        _show_notes(outcome.notes)
        return exit_code(outcome)

    _run(settings, body)


@app.command("tool")
@click.argument("session_id")
@click.argument("name")
@click.argument("arguments", default="{}")
@click.option("--json", "as_json", is_flag=True, help="Print every OmniMessage as a JSON line.")
@pass_settings
def tool(settings: Settings, session_id: str, name: str, arguments: str, as_json: bool) -> None:
    """Run any tool with JSON ARGUMENTS ("-": read them from stdin); prints its output as it
    streams. Exits 0 when the call completed, 1 when it failed, 130 when aborted."""
    if arguments == "-":
        arguments = sys.stdin.read()
    try:
        json.loads(arguments)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="ARGUMENTS") from None

    async def body(client: EnvdClient) -> int:
        printer = _Printer(split_notes=False)
        outcome = await _call(client, session_id, name, arguments, printer, as_json)
        if printer.last != "\n" and sys.stdout.isatty():
            _write("\n")
        return {"completed": 0, "aborted": EXIT_INTERRUPTED}.get(outcome.stop_reason,
                                                                  EXIT_FAILED)

    _run(settings, body)


@app.command("tools")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Full definitions, with JSON Schemas.")
@pass_settings
def tools(settings: Settings, session_id: str, as_json: bool) -> None:
    """List the tools a session offers."""

    async def body(client: EnvdClient) -> None:
        definitions = await client.list_tools(session_id)
        if as_json:
            _print_json([{**_as_dict(d), "parameters": json.loads(d.parameters or "{}")}
                         for d in definitions])
            return
        table = Table(box=None, header_style="bold")
        table.add_column("TOOL")
        table.add_column("PERM")
        table.add_column("DESCRIPTION", overflow="fold")
        for d in definitions:
            table.add_row(d.name, d.permission, d.description.split(". ")[0].rstrip("."))
        out.print(table)

    _run(settings, body)


@app.command("events")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print every event as a JSON line.")
@pass_settings
def events(settings: Settings, session_id: str, as_json: bool) -> None:
    """Follow a session's events (background commands finishing, the session closing)."""

    async def body(client: EnvdClient) -> None:
        async for event in client.watch(session_id):
            if as_json:
                click.echo(json.dumps(_as_dict(event), ensure_ascii=False))
                continue
            kind = event.WhichOneof("event")
            if kind == "command_finished":
                done = event.command_finished
                status = done.detail or f"exit {done.exit_code}"
                out.print(f"{event.timestamp} [bold]{done.process_id}[/] {done.status} "
                          f"({status}): {done.command}")
                if done.output_tail:
                    out.print(done.output_tail.rstrip("\n"), style="dim", markup=False)
            elif kind == "session_closed":
                out.print(f"{event.timestamp} session closed ({event.session_closed.reason})")
            sys.stdout.flush()

    _run(settings, body)


# --- files ---------------------------------------------------------------------------------

_REMOTE = re.compile(r"^([^/:]+):(.*)$")


class Meter:
    """Progress of one copy: a rich bar on a terminal, plain percentage lines otherwise."""

    def __init__(self, label: str, mode: bool | None) -> None:
        self.label = label
        self.enabled = err.is_terminal if mode is None else mode
        self.bar: Progress | None = None
        self.task: Any = None
        self.last_step = -1

    def __enter__(self) -> Meter:
        if self.enabled and err.is_terminal:
            self.bar = Progress(
                # Long paths must not squeeze the bar away.
                TextColumn("{task.description}", table_column=Column(
                    max_width=48, no_wrap=True, overflow="ellipsis")),
                BarColumn(), TaskProgressColumn(),
                DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(), console=err,
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=None)
        return self

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total or None)
            return
        if total:
            step = min(100, done * 100 // total) // 10 * 10
            if step > self.last_step:
                self.last_step = step
                err.print(f"{self.label}: {step:3d}% ({_size(done)} of {_size(total)})",
                          markup=False)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1000
    return f"{count} B"


@app.command("cp")
@click.argument("source")
@click.argument("destination")
@click.option("--progress/--no-progress", default=None,
              help="Show progress (default: when stderr is a terminal; otherwise plain lines).")
@pass_settings
def cp(settings: Settings, source: str, destination: str, progress: bool | None) -> None:
    """Copy files into or out of a sandbox: one side is SESSION:PATH.

    \b
    envctl cp ./src S:dir      ./src goes into directory dir (created when missing): dir/src
    envctl cp ./src/. S:dir    the contents of ./src go into dir
    envctl cp S:dir/src ./out  into ./out when it is a directory, else copied as ./out
    Remote paths are relative to the workspace. Symlinks are copied as links."""
    src_remote, dst_remote = _REMOTE.match(source), _REMOTE.match(destination)
    if bool(src_remote) == bool(dst_remote):
        raise click.UsageError("exactly one of SOURCE and DESTINATION must be SESSION:PATH")

    async def upload(client: EnvdClient, session_id: str, path: str) -> None:
        local = Path(source)
        contents = source.rstrip("/").endswith("/.") or source == "."
        label = f"{source} → {session_id}:{path or '.'}"
        with Meter(label, progress) as meter:
            reply = await client.upload_path(session_id, local, path, contents=contents,
                                             progress=meter)
        err.print(f"copied {source} into {session_id}:{reply.destination} "
                  f"({reply.entries} entries, {_size(reply.bytes)})", markup=False)

    target = Path(destination)
    into = target.is_dir() or destination.endswith("/")

    async def download(client: EnvdClient, session_id: str, path: str) -> None:
        label = f"{session_id}:{path or '.'} → {destination}"
        # Not into a directory: unpack beside the target, then rename (all or nothing).
        scratch = None if into else Path(tempfile.mkdtemp(prefix=".envctl-", dir=_parent(target)))
        try:
            with Meter(label, progress) as meter:
                got = await client.download_to(session_id, path, scratch or target,
                                               progress=meter)
            if scratch is not None:
                os.replace(got, target)
                got = target
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        err.print(f"copied {session_id}:{path or '.'} to {got}", markup=False)

    async def body(client: EnvdClient) -> None:
        if dst_remote:
            await upload(client, dst_remote.group(1), dst_remote.group(2))
        elif src_remote:
            await download(client, src_remote.group(1), src_remote.group(2))

    _run(settings, body)


def _parent(path: Path) -> Path:
    parent = path.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def main() -> None:
    app(prog_name="envctl")


if __name__ == "__main__":
    main()
