import pytest

from tests.helpers import call_tool

pytestmark = pytest.mark.anyio


async def test_echo(sandbox_env):
    result = await call_tool(sandbox_env, "exec_command", {"cmd": "echo hello"})
    assert result.output == "hello\n"
    assert result.stop_reason == "completed"
