"""The OpenAI-compatible client against recorded chat-completions streams, served by a local
HTTP server (stdlib, 127.0.0.1): parallel tool calls, reasoning_content, usage, history, errors."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from engine import omni
from engine.interface import ApprovalDecision
from engine.llm import LLMStream
from engine.loop import AgentSession
from engine.models.openai_compat import OpenAICompatConfig, OpenAICompatModel
from engine.omni import OmniMessage, ToolDefinition
from tests.engine.fakes import FakeEnvironment, check_stream, collect, of_type

pytestmark = pytest.mark.anyio


@dataclass
class Reply:
    status: int = 200
    events: list[str] = field(default_factory=list)  # SSE data payloads, sent as `data: …`
    body: bytes = b""  # a non-streaming body (errors)
    delay_s: float = 0.0  # between events
    done: bool = True  # end with `data: [DONE]`


class FakeProvider:
    """Answers each POST to /v1/chat/completions with the next queued reply; keeps the requests
    and their headers."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("content-length", 0))
                provider.requests.append(json.loads(self.rfile.read(length)))
                provider.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = provider.replies.pop(0)
                self.send_response(reply.status)
                if reply.status != 200:
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    return
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                try:
                    for event in reply.events:
                        self.wfile.write(f"data: {event}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(reply.delay_s)
                    if reply.done:
                        self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (an abort)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    yield server
    server.close()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None,
          usage: dict[str, Any] | None = None) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                            "created": 1700000000, "model": "test-model", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body)


def tool_delta(index: int, arguments: str, call_id: str | None = None,
               name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id:
        call.update(id=call_id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


# A recorded DeepSeek-style stream: reasoning, text, two parallel tool calls whose argument
# fragments interleave, then the usage chunk.
PARALLEL = [
    chunk({"role": "assistant", "content": None, "reasoning_content": "Two files, "}),
    chunk({"reasoning_content": "read both."}),
    chunk({"content": "Reading "}),
    chunk({"content": "both."}),
    chunk(tool_delta(0, "", "call_a", "read_file")),
    chunk(tool_delta(0, '{"file_path": ')),
    chunk(tool_delta(1, '{"cmd":', "call_b", "exec_command")),
    chunk(tool_delta(0, '"a.txt"}')),
    chunk(tool_delta(1, ' "ls"}')),
    chunk({}, finish="tool_calls"),
    chunk(None, usage={"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                       "prompt_tokens_details": {"cached_tokens": 64}}),
]
ANSWER = [chunk({"role": "assistant", "content": "Done."}), chunk({}, finish="stop"),
          chunk(None, usage={"prompt_tokens": 150, "completion_tokens": 2, "total_tokens": 152})]
TOOLS = [ToolDefinition(name="read_file", description="Read a file.",
                        parameters={"type": "object",
                                    "properties": {"file_path": {"type": "string"}}}),
         ToolDefinition(name="exec_command", description="Run a command.")]


def model_for(provider: FakeProvider, **config: Any) -> OpenAICompatModel:
    return OpenAICompatModel(OpenAICompatConfig(
        model="test-model", base_url=provider.base_url, api_key="sk-test",
        system_prompt="You are terse.", tools=TOOLS, **config))


async def drain(stream: LLMStream) -> list[OmniMessage]:
    return [m async for m in stream]


async def test_parallel_tool_calls_reasoning_and_usage(provider: FakeProvider) -> None:
    provider.replies = [Reply(events=PARALLEL), Reply(events=ANSWER)]
    model = model_for(provider)
    prompt = omni.user_text("What is in a.txt, and what files are there?")
    stream = model.stream_generate([prompt])
    out = await drain(stream)
    assert stream.outcome.status == "completed"
    check_stream(out)

    shape = [(m.payload.type, getattr(m.payload, "event_type", None),  # type: ignore[attr-defined]
              getattr(m.payload, "tool_call_id", None)) for m in out]
    assert shape == [
        ("partial_thinking", "start", None), ("partial_thinking", "delta", None),
        ("partial_thinking", "delta", None), ("partial_thinking", "stop", None),
        ("thinking", None, None),
        ("partial_text", "start", None), ("partial_text", "delta", None),
        ("partial_text", "delta", None), ("partial_text", "stop", None), ("text", None, None),
        ("partial_tool_call", "start", "call_a"), ("partial_tool_call", "delta", "call_a"),
        ("partial_tool_call", "start", "call_b"), ("partial_tool_call", "delta", "call_b"),
        ("partial_tool_call", "delta", "call_a"), ("partial_tool_call", "delta", "call_b"),
        ("partial_tool_call", "stop", "call_a"), ("tool_call", None, "call_a"),
        ("partial_tool_call", "stop", "call_b"), ("tool_call", None, "call_b"),
        ("token_usage", None, None),
    ]
    thinking = of_type(out, omni.ThinkingPayload)[0]
    assert (thinking.thinking, thinking.fidelity) == ("Two files, read both.",
                                                      {"reasoning_field": "reasoning_content"})
    assert of_type(out, omni.TextPayload)[0].text == "Reading both."
    calls = of_type(out, omni.ToolCallPayload)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("read_file", {"file_path": "a.txt"}), ("exec_command", {"cmd": "ls"})]
    usage = of_type(out, omni.TokenUsagePayload)[0]
    assert usage.request.model_dump() == {"cache_read": 64, "cache_write": 0, "output": 20,
                                          "total": 120}

    first = provider.requests[0]
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert first["model"] == "test-model"
    assert provider.headers[0]["authorization"] == "Bearer sk-test"
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file", "exec_command"]
    assert first["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is in a.txt, and what files are there?"}]

    # The next request sends only the tool outputs; the model keeps the history.
    outputs = [omni.tool_call_output("call_a", "hello\n"),
               omni.tool_call_output("call_b", "a.txt\n", "completed")]
    second = model.stream_generate(outputs)
    answer = await drain(second)
    assert second.outcome.status == "completed"
    assert of_type(answer, omni.TextPayload)[0].text == "Done."
    assert of_type(answer, omni.TokenUsagePayload)[0].session.total == 272
    assert provider.requests[1]["messages"][1:] == [
        {"role": "user", "content": "What is in a.txt, and what files are there?"},
        {"role": "assistant", "content": "Reading both.",
         "reasoning_content": "Two files, read both.",
         "tool_calls": [
             {"id": "call_a", "type": "function",
              "function": {"name": "read_file", "arguments": '{"file_path": "a.txt"}'}},
             {"id": "call_b", "type": "function",
              "function": {"name": "exec_command", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "hello\n"},
        {"role": "tool", "tool_call_id": "call_b", "content": "a.txt\n"},
    ]
    assert len(model.history) == 1 + 4 + 2 + 1


@pytest.mark.parametrize(("status", "expected"), [
    (401, "auth"), (403, "auth"), (429, "timeout"), (503, "timeout"), (500, "failed"),
    (400, "failed"),
])
async def test_error_status_maps_to_an_outcome(provider: FakeProvider, status: int,
                                               expected: str) -> None:
    error = {"error": {"message": f"simulated {status}", "type": "x", "code": None}}
    provider.replies = [Reply(status=status, body=json.dumps(error).encode())]
    model = model_for(provider)
    stream = model.stream_generate([omni.user_text("hi")])
    out = await drain(stream)
    assert out == []
    assert stream.outcome.status == expected
    assert stream.outcome.message is not None and f"HTTP {status}" in stream.outcome.message
    assert f"simulated {status}" in stream.outcome.message
    assert model.history == []  # nothing committed: the engine may re-send the same input
    assert len(provider.requests) == 1  # and the client itself never retried


async def test_bad_json_and_truncated_streams_are_malformed(provider: FakeProvider) -> None:
    provider.replies = [Reply(events=[chunk({"content": "Hel"}), "{not json"]),
                        Reply(events=[chunk({"content": "Hel"})], done=False)]
    model = model_for(provider)
    for _ in range(2):
        stream = model.stream_generate([omni.user_text("hi")])
        out = await drain(stream)
        assert stream.outcome.status == "malformed", stream.outcome
        check_stream(out)  # the open text segment was closed
        text = of_type(out, omni.TextPayload)[0]
        assert (text.text, text.stop_reason) == ("Hel", "malformed")
    assert model.history == []


async def test_unreachable_server_is_a_timeout() -> None:
    model = OpenAICompatModel(OpenAICompatConfig(model="m", base_url="http://127.0.0.1:9/v1",
                                                 api_key="k"))
    stream = model.stream_generate([omni.user_text("hi")])
    assert await drain(stream) == []
    assert stream.outcome.status == "timeout"


async def test_abort_mid_stream(provider: FakeProvider) -> None:
    provider.replies = [Reply(events=[chunk({"content": f"w{i} "}) for i in range(50)],
                              delay_s=0.1)]
    model = model_for(provider)
    signal = asyncio.Event()
    stream = model.stream_generate([omni.user_text("hi")], signal=signal)
    out: list[OmniMessage] = []
    async for message in stream:
        out.append(message)
        if len(out) == 3:
            signal.set()
    assert stream.outcome.status == "aborted"
    check_stream(out)
    assert of_type(out, omni.TextPayload)[0].stop_reason == "aborted"
    assert model.history == []


async def test_agent_loop_with_the_openai_client(provider: FakeProvider) -> None:
    """The whole loop over the real client: calls made, outputs re-fed in call order."""
    calls = [chunk(tool_delta(0, '{"text": "slow", "delay_s": 0.3}', "c1", "echo")),
             chunk(tool_delta(1, '{"text": "fast"}', "c2", "echo")),
             chunk({}, finish="tool_calls")]
    provider.replies = [Reply(events=calls), Reply(events=ANSWER)]
    model = model_for(provider)

    async def allow(_: OmniMessage) -> ApprovalDecision:
        return "allow"

    out = await collect(AgentSession(model, FakeEnvironment()).run([omni.user_text("go")],
                                                                   approve=allow))
    check_stream(out)
    assert [e.status for e in of_type(out, omni.RequestEndPayload)] == ["completed"] * 2
    tool_messages = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("c1", "slow"),
                                                                          ("c2", "fast")]
