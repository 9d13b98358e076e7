"""read_image: images from the sandbox (and, with network, the web) as data URLs."""

from __future__ import annotations

import base64
import http.server
import struct
import threading
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from engine import omni
from envd.environment import SandboxEnvironment
from envd.sessions.model import SessionOptions
from tests.helpers import CallResult, call_tool

pytestmark = pytest.mark.anyio

SUPPORTED = "read_image reads PNG, JPEG, GIF and WebP images"


def make_png(width: int, height: int) -> bytes:
    """A real RGB PNG: signature, IHDR, one zlib IDAT, IEND, each chunk with its CRC."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(_raw_rows(width, height))) + chunk(b"IEND", b""))


def _raw_rows(width: int, height: int) -> bytes:
    """Each row: filter type 0, then its pixels."""
    return b"".join(
        b"\x00" + b"".join(bytes((x * 40 % 256, y * 40 % 256, 128)) for x in range(width))
        for y in range(height)
    )


async def put_file(env: SandboxEnvironment, path: str, data: bytes) -> None:
    """Write a file inside the sandbox, through the sandbox's own shell."""
    encoded = base64.b64encode(data).decode()
    result = await call_tool(
        env, "exec_command", {"cmd": f"printf %s {encoded} | base64 -d > '{path}'"}
    )
    assert result.stop_reason == "completed", result.output


async def read_image(env: SandboxEnvironment, source: str) -> CallResult:
    return await call_tool(env, "read_image", {"source": source})


def assert_image(result: CallResult, mime: str, data: bytes) -> None:
    url = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    assert result.output == f"{mime}, {len(data) / 1000:.1f} kB"
    assert result.stop_reason == "completed"
    assert result.images == [url]
    # Sent once as a delta with no text right before stop, and again on the complete message.
    carrying = [m for m in result.messages
                if isinstance(m.payload, omni.PartialToolCallOutputPayload) and m.payload.images]
    assert len(carrying) == 1
    assert carrying[0] is result.messages[-3]
    payload = carrying[0].payload
    assert isinstance(payload, omni.PartialToolCallOutputPayload)
    assert (payload.event_type, payload.output, payload.images) == ("delta", "", [url])


def workspace(env: SandboxEnvironment) -> str:
    return env.session.handle.workspace


async def test_png_in_the_workspace(sandbox_env: SandboxEnvironment) -> None:
    png = make_png(3, 2)
    assert zlib.decompress(png[png.index(b"IDAT") + 4:-16]) == _raw_rows(3, 2)
    await put_file(sandbox_env, "pic.png", png)
    assert_image(await read_image(sandbox_env, "pic.png"), "image/png", png)
    # The absolute spelling of the same file.
    assert_image(await read_image(sandbox_env, f"{workspace(sandbox_env)}/pic.png"),
                 "image/png", png)


async def test_type_from_magic_bytes_else_extension(sandbox_env: SandboxEnvironment) -> None:
    png = make_png(1, 1)
    gif = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
    webp = (b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00"
            b"/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00")
    jpeg = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)) + b"\xff\xd9"
    await put_file(sandbox_env, "really-a-png.jpg", png)
    assert_image(await read_image(sandbox_env, "really-a-png.jpg"), "image/png", png)
    for name, data, mime in (("a.bin", gif, "image/gif"), ("b", webp, "image/webp"),
                             ("c.dat", jpeg, "image/jpeg")):
        await put_file(sandbox_env, name, data)
        assert_image(await read_image(sandbox_env, name), mime, data)
    # No known magic: the extension decides, for binary content.
    odd = b"\x00\x01\x02\x03 not quite a webp"
    await put_file(sandbox_env, "odd.webp", odd)
    assert_image(await read_image(sandbox_env, "odd.webp"), "image/webp", odd)


async def test_text_file_fails(sandbox_env: SandboxEnvironment) -> None:
    ws = workspace(sandbox_env)
    for name in ("notes.txt", "fake.png"):
        await put_file(sandbox_env, name, b"just some text\nin two lines\n")
        result = await read_image(sandbox_env, name)
        assert result.output == (
            f'"{ws}/{name}" is a text file, not an image. {SUPPORTED}; use read_file for text.'
        )
        assert result.stop_reason == "failed"
        assert result.images is None


async def test_too_large_empty_missing_and_other_files(sandbox_env: SandboxEnvironment) -> None:
    ws = workspace(sandbox_env)
    six_mib = 6 * 1024 * 1024
    made = await call_tool(sandbox_env, "exec_command", {
        "cmd": f"{{ printf '\\211PNG\\r\\n\\032\\n'; head -c {six_mib - 8} /dev/zero; }} > big.png"
               " && : > empty.png && mkdir -p folder.png && printf '\\0\\1\\2' > blob.bin"})
    assert made.output == "[no output]"

    cases = {
        "big.png": f'"{ws}/big.png" is too large for read_image ({six_mib} bytes; '
                   "the limit is 5 MiB).",
        "empty.png": f'"{ws}/empty.png" is empty (0 bytes): there is no image to read.',
        "missing.png": f'File not found: "{ws}/missing.png". Absolute paths are supported; '
                       f"relative paths resolve against the workspace ({ws}).",
        "folder.png": f'Cannot read "{ws}/folder.png": it is a directory. '
                      "Pass the path of an image file.",
        "blob.bin": f'"{ws}/blob.bin" is not a supported image: {SUPPORTED}.',
    }
    for name, text in cases.items():
        result = await read_image(sandbox_env, name)
        assert (result.output, result.stop_reason) == (text, "failed"), name
        assert result.images is None

    # Exactly 5 MiB is still fine.
    await call_tool(sandbox_env, "exec_command", {"cmd": "truncate -s 5242880 big.png"})
    result = await read_image(sandbox_env, "big.png")
    assert (result.output, result.stop_reason) == ("image/png, 5242.9 kB", "completed")


async def test_url_without_network(sandbox_env: SandboxEnvironment) -> None:
    url = "https://example.com/cat.png"
    result = await read_image(sandbox_env, url)
    assert result.output == (
        f'Cannot fetch "{url}": this session has no network access (network "none"). '
        "Put the image in the workspace and pass its path instead."
    )
    assert result.stop_reason == "failed"
    result = await read_image(sandbox_env, "ftp://example.com/cat.png")
    assert result.output == ('Cannot read "ftp://example.com/cat.png": unsupported URL scheme '
                             '"ftp". Pass a local path or an http(s) URL.')
    result = await call_tool(sandbox_env, "read_image", {})
    assert result.output == 'Missing required argument "source" for read_image.'


# --- URLs, fetched inside the sandbox ----------------------------------------------------------

PNG = make_png(4, 4)


class _Handler(http.server.BaseHTTPRequestHandler):
    routes = {
        "/pic": (PNG, "image/png"),
        "/page.html": (b"<html><body>not an image</body></html>", "text/html"),
        "/huge.png": (b"\x89PNG\r\n\x1a\n" + bytes(6 * 1024 * 1024), "image/png"),
    }

    def do_GET(self) -> None:  # noqa: N802
        body, kind = self.routes.get(self.path, (b"", ""))
        self.send_response(200 if kind else 404)
        self.send_header("Content-Type", kind or "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
async def net_env(manager_factory: Any) -> AsyncIterator[SandboxEnvironment]:
    # Local backend only: test traffic stays on loopback (a container would reach the host
    # through the docker bridge, a private-range address tests must not target).
    manager = await manager_factory("local")
    session = await manager.create(SessionOptions(network="bridge"), tenant="")
    env = SandboxEnvironment(session, manager)
    yield env
    await env.dispose()


@pytest.fixture
def web_server() -> Iterator[Callable[[str], str]]:
    """``start(host)`` -> base URL of a small HTTP server on that host address."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(host: str) -> str:
        try:
            server = http.server.ThreadingHTTPServer((host, 0), _Handler)
        except OSError as exc:
            pytest.skip(f"cannot serve on {host}: {exc}")
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://{host}:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


async def host_address(env: SandboxEnvironment) -> str:
    """The address at which the sandbox reaches the test server: loopback (local backend)."""
    assert env.session.handle.backend == "local"
    return "127.0.0.1"


async def test_url_is_fetched_inside_the_sandbox(
    net_env: SandboxEnvironment, web_server: Callable[[str], str]
) -> None:
    base = web_server(await host_address(net_env))
    assert_image(await read_image(net_env, f"{base}/pic"), "image/png", PNG)

    result = await read_image(net_env, f"{base}/page.html")
    assert result.output == (
        f'"{base}/page.html" is a text file, not an image. {SUPPORTED}; use read_file for text.'
    )
    result = await read_image(net_env, f"{base}/huge.png")
    assert result.output == f'"{base}/huge.png" is too large for read_image (more than 5 MiB).'
    result = await read_image(net_env, f"{base}/nothing.png")
    assert result.output == f'Cannot fetch "{base}/nothing.png": HTTP 404 Not Found.'
    assert result.stop_reason == "failed"
