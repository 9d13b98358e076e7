"""OmniMessage JSON is exactly the seed's shape, and the round trip is lossless."""

from __future__ import annotations

import json

import pytest

from engine import omni
from engine.client import message_from_wire
from envd.server.convert import message_to_wire


def test_tool_call_output_shape() -> None:
    message = omni.tool_call_output("c1", "hi", "completed")
    data = omni.to_dict(message)
    assert set(data) == {"timestamp", "type", "payload"}
    assert data["type"] == "model_msg"
    assert data["payload"] == {
        "type": "tool_call_output",
        "role": "user",
        "output": "hi",
        "tool_call_id": "c1",
        "stop_reason": "completed",
    }
    assert data["timestamp"].endswith("Z")


def test_partial_shape_has_stop_reason_and_no_images() -> None:
    data = omni.to_dict(omni.partial_tool_call_output("c1", "start"))
    assert data["payload"] == {
        "type": "partial_tool_call_output",
        "role": "user",
        "event_type": "start",
        "output": "",
        "tool_call_id": "c1",
        "stop_reason": "completed",
    }


SAMPLES = [
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "model_msg",
        "payload": {
            "type": "thinking",
            "role": "assistant",
            "thinking": "",
            "fidelity": {"id": "rs_1", "encrypted_content": "gAAA", "nested": [1, {"a": None}]},
        },
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "model_msg",
        "origin": ["child-1"],
        "payload": {"type": "text", "role": "assistant", "text": "hi"},
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "event_msg",
        "payload": {"type": "abort", "reason": None},
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "event_msg",
        "payload": {
            "type": "token_usage",
            "session": {"cache_read": 1, "cache_write": 2, "output": 3, "total": 6},
            "request": {"cache_read": 0, "cache_write": 0, "output": 3, "total": 3},
        },
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "model_msg",
        "payload": {
            "type": "tool_call_output",
            "role": "user",
            "output": "x",
            "images": ["data:image/png;base64,AA=="],
            "tool_call_id": "c",
            "stop_reason": "completed",
        },
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "model_msg",
        "payload": {"type": "future_payload", "role": "user", "something": {"new": True}},
    },
    {
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "session_meta",
        "payload": {
            "session_id": "s",
            "provider": "p",
            "model_id": "m",
            "model_context_window": 1000,
            "system_prompt": "",
            "tools": [{"name": "t", "description": "d"}],
            "agent_state": "/a",
            "workspace": "/w",
        },
    },
]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["payload"].get("type", "meta"))
def test_json_round_trip_is_lossless(sample: dict) -> None:  # type: ignore[type-arg]
    assert omni.to_dict(omni.parse(json.dumps(sample))) == sample


@pytest.mark.parametrize("sample", SAMPLES[:6], ids=lambda s: s["payload"]["type"])
def test_wire_round_trip_is_lossless(sample: dict) -> None:  # type: ignore[type-arg]
    message = omni.parse(sample)
    assert omni.to_dict(message_from_wire(message_to_wire(message))) == sample


def test_parse_rejects_garbage() -> None:
    for bad in ("[]", "{}", '{"type": "model_msg"}', "not json"):
        with pytest.raises(omni.OmniMessageError):
            omni.parse(bad)


def test_guards() -> None:
    assert omni.is_partial_payload(omni.partial_tool_call_output("c", "delta", "x"))
    assert omni.is_complete_model_message(omni.tool_call_output("c", "x"))
    assert omni.is_event_message(omni.request_begin())
    assert omni.with_origin(omni.user_text("x"), "s1").origin == ["s1"]
