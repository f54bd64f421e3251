"""The transport seam against real servers on 127.0.0.1: a real forward proxy (proxy.py, from
the test extra), a TLS relay with a certificate made by the test (trustme), hand-made
redirecting and echoing servers in front of, or instead of, the simulated server."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from yarl import URL

import workloads
from workloads.model.errors import TargetError
from workloads.model.scenario import Timeouts
from workloads.model.target import Target
from workloads.wire.arrival import kernel_stamps
from workloads.wire.client import HttpChatClient
from workloads.wire.identify import identify
from workloads.wire.transport import Transport, transport_for

BODY = {
    "model": "sim-fast",
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": 4,
    "stream": True,
}


def _body(model: str) -> dict[str, object]:
    return {**BODY, "model": model}


# --- hand-made servers ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _raw_server(answer: bytes | None, seen: list[bytes]) -> AsyncIterator[int]:
    """Reads one request per connection (head and Content-Length body), keeps it in
    ``seen``, answers ``answer`` (a format string with {port}) and closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length)
            seen.append(head + body)
            writer.write(
                (answer or b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").replace(
                    b"{port}", str(port).encode()
                )
            )
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield port


@contextlib.asynccontextmanager
async def _tls_relay(upstream_port: int, ctx: ssl.SSLContext) -> AsyncIterator[int]:
    """A TLS-terminating relay: https://127.0.0.1:PORT → http://127.0.0.1:upstream_port."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """A server context with a certificate for 127.0.0.1 from a CA made here, and the CA's
    PEM file."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return ctx, str(pem)


@pytest.fixture(scope="module")
def proxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real forward proxy (proxy.py) on 127.0.0.1: its URL and its log (one access-log
    line per request or CONNECT it carried)."""
    pytest.importorskip("proxy", reason="proxy.py (the test extra) is not installed")
    where = tmp_path_factory.mktemp("proxy")
    port_file, log = where / "port", where / "proxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "--hostname",
                "127.0.0.1",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--num-acceptors",
                "1",
                "--num-workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(600):  # bounded: 60 s for a cold start on a loaded machine
            if port_file.exists() and port_file.read_text().strip():
                break
            if process.poll() is not None:
                pytest.fail(f"proxy.py exited: {log.read_text()[-500:]}")
            time.sleep(0.1)
        else:
            pytest.fail("proxy.py did not start within 60 s")
        yield f"http://127.0.0.1:{port_file.read_text().strip()}", log
    finally:
        process.terminate()
        process.wait(timeout=30)


def _count(log: Path, what: str) -> int:
    return sum(1 for line in log.read_text().splitlines() if "access_log" in line and what in line)


async def _carried(log: Path, what: str, at_least: int = 0) -> int:
    """Access-log lines of the proxy naming ``what`` (e.g. "POST 127.0.0.1:8000"), once
    there are ``at_least`` of them or 10 s passed: proxy.py writes a line when the
    connection closes, a moment after the client closed it (on this loop: so no blocking
    sleep here)."""
    for _ in range(200):  # bounded
        count = _count(log, what)
        if count >= at_least:
            return count
        await asyncio.sleep(0.05)
    return count


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


# --- redirects -----------------------------------------------------------------------------


async def test_chat_follows_308_keeping_body_and_remembers_it(simulated_server, no_proxy_env):
    sim_port = simulated_server.port
    seen: list[bytes] = []
    moved = (
        f"HTTP/1.1 308 Permanent Redirect\r\nLocation: http://127.0.0.1:{sim_port}"
        "/v1/chat/completions\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    async with (
        _raw_server(moved, seen) as port,
        HttpChatClient(f"http://127.0.0.1:{port}/v1") as client,
    ):
        first = await client.stream_chat(_body(simulated_server.model))
        second = await client.stream_chat(_body(simulated_server.model))
    assert first.ok and first.text, first.error_message
    assert second.ok and second.text
    assert len(seen) == 1  # the second turn went to the new place at once
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1")
    assert b'"hello"' in seen[0]
    assert len(simulated_server.truths()) == 2  # the body reached it each time


async def test_redirects_stop_after_five_hops(no_proxy_env):
    seen: list[bytes] = []
    loop_back = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /v1/chat/completions\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    async with (
        _raw_server(loop_back, seen) as port,
        HttpChatClient(f"http://127.0.0.1:{port}/v1") as client,
    ):
        response = await client.stream_chat(BODY)
    assert response.error_kind == "http_other"
    assert response.error_message is not None
    assert "more than 5 redirects" in response.error_message
    assert "\n" not in response.error_message
    assert len(seen) == 6  # the request and five hops


@pytest.mark.parametrize("status", [301, 302, 303])
async def test_post_redirect_301_302_303_names_status_and_location(status, no_proxy_env):
    seen: list[bytes] = []
    answer = (
        f"HTTP/1.1 {status} Moved\r\nLocation: https://other.example/v1/chat/completions"
        "\r\nContent-Length: 0\r\n\r\n"
    ).encode()
    async with (
        _raw_server(answer, seen) as port,
        HttpChatClient(f"http://127.0.0.1:{port}/v1") as client,
    ):
        response = await client.stream_chat(BODY)
    message = response.error_message or ""
    assert response.http_status == status and len(seen) == 1
    assert f"HTTP {status}" in message
    assert "https://other.example/v1/chat/completions" in message
    assert "\n" not in message


async def test_request_line_percent_encodes_spaces_and_non_ascii(no_proxy_env):
    seen: list[bytes] = []
    async with (
        _raw_server(None, seen) as port,
        HttpChatClient(f"http://127.0.0.1:{port}/my v1/ü") as client,
    ):
        await client.stream_chat(BODY)
    assert seen[0].startswith(b"POST /my%20v1/%C3%BC/chat/completions HTTP/1.1\r\n")


# --- TLS -----------------------------------------------------------------------------------


async def test_tls_fails_without_the_ca_and_works_with_ca_bundle_or_insecure(
    simulated_server, tls, no_proxy_env
):
    server_ctx, ca_pem = tls
    async with _tls_relay(simulated_server.port, server_ctx) as port:
        url = f"https://127.0.0.1:{port}/v1"
        async with HttpChatClient(url) as client:
            failed = await client.stream_chat(_body(simulated_server.model))
        assert failed.error_kind == "tls"
        message = failed.error_message or ""
        assert "--ca-bundle" in message and "--insecure" in message and "\n" not in message
        with pytest.raises(TargetError) as read_failed:
            await identify(Target(url), 10)
        assert "--ca-bundle" in str(read_failed.value)
        assert "did not answer JSON" not in str(read_failed.value)

        for target in (Target(url, ca_bundle=ca_pem), Target(url, insecure=True)):
            transport = transport_for(target)
            model, _ = await identify(target, 10, transport)
            async with HttpChatClient(url, transport=transport) as client:
                response = await client.stream_chat(_body(model))
            assert response.ok and response.text, response.error_message


def test_missing_ca_bundle_is_one_line(tmp_path: Path):
    with pytest.raises(TargetError, match=r"^Target\.ca_bundle .*no such file"):
        transport_for(Target("https://127.0.0.1:1/v1", ca_bundle=str(tmp_path / "none.pem")))


# --- proxies -------------------------------------------------------------------------------


async def test_env_proxy_carries_chat_and_reads_and_no_proxy_bypasses_it(
    simulated_server, proxy_server, no_proxy_env
):
    proxy, log = proxy_server
    origin = f"127.0.0.1:{simulated_server.port}"
    no_proxy_env.setenv("HTTP_PROXY", proxy)
    target = simulated_server.target
    before = _count(log, f"POST {origin}/v1/chat/completions")
    model, _ = await identify(target, 30)
    async with HttpChatClient(target.base_url, transport=transport_for(target)) as client:
        response = await client.stream_chat(_body(model))
    assert response.ok and response.text, response.error_message
    assert await _carried(log, f"GET {origin}/v1/models", 1) >= 1
    assert await _carried(log, f"POST {origin}/v1/chat/completions", before + 1) == before + 1

    no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
    async with HttpChatClient(target.base_url, transport=transport_for(target)) as client:
        direct = await client.stream_chat(_body(model))
    assert direct.ok
    await asyncio.sleep(0.5)  # a line it would have written by now (none is expected)
    assert _count(log, f"POST {origin}/v1/chat/completions") == before + 1


async def test_https_target_through_a_connect_tunnel(
    simulated_server, proxy_server, tls, no_proxy_env
):
    proxy, log = proxy_server
    server_ctx, ca_pem = tls
    async with _tls_relay(simulated_server.port, server_ctx) as port:
        url = f"https://127.0.0.1:{port}/v1"
        target = Target(url, proxy=proxy, ca_bundle=ca_pem)  # --proxy, not the environment
        transport = transport_for(target)
        model, _ = await identify(target, 30, transport)
        async with HttpChatClient(url, transport=transport) as client:
            response = await client.stream_chat(_body(model))
    assert response.ok and response.text, response.error_message
    # the read's tunnel and the chat's
    assert await _carried(log, f"CONNECT 127.0.0.1:{port}", 2) >= 2


async def test_run_through_a_proxy_says_so_in_the_environment(
    simulated_server, proxy_server, tiny_scenario, tmp_path, no_proxy_env
):
    proxy, log = proxy_server
    no_proxy_env.setenv("HTTP_PROXY", proxy)
    origin = f"127.0.0.1:{simulated_server.port}"
    before = _count(log, f"POST {origin}/v1/chat/completions")
    result = await workloads.run_async(
        tiny_scenario, simulated_server.target, out_dir=tmp_path / "run"
    )
    assert result.environment["proxy"] == f"{proxy} (from HTTP_PROXY)"
    # plain TCP to the proxy: the reads are the kernel's to stamp (wire/arrival.py)
    assert result.environment["arrival_stamps"] == ("kernel" if kernel_stamps() else "event loop")
    assert result.records and all(r.error_kind is None for r in result.records)
    # proxy.py writes one line per connection (kept alive: many requests), when it closes
    assert await _carried(log, f"POST {origin}/v1/chat/completions", before + 1) > before
    assert await _carried(log, f"GET {origin}/v1/models", 1) >= 1
    assert await _carried(log, f"GET {origin}/metrics", 1) >= 1


async def test_the_embedded_simulated_server_is_never_reached_through_a_proxy(
    tiny_scenario, tmp_path, no_proxy_env
):
    # A machine behind a corporate proxy has HTTP(S)_PROXY set; the first run (no --target)
    # talks to the server this process starts on loopback, which no proxy could reach.
    no_proxy_env.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    no_proxy_env.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    result = await workloads.run_async(tiny_scenario, out_dir=tmp_path / "run")
    assert result.records and all(r.error_kind is None for r in result.records)
    assert "proxy" not in result.environment or "127.0.0.1:9" not in str(
        result.environment["proxy"]
    )


def test_https_proxy_and_bad_proxy_urls_are_one_line():
    with pytest.raises(TargetError, match="not http://HOST:PORT"):
        Transport(proxy="https://proxy.example:3128")


# --- credentials and headers ---------------------------------------------------------------


@pytest.mark.parametrize("key", ["abc\r\nX-Injected: 1", "clé-€"])
def test_bad_api_keys_are_refused_in_one_line(key, monkeypatch):
    monkeypatch.setenv("WL_TEST_KEY", key)
    with pytest.raises(TargetError) as err:
        transport_for(Target("http://127.0.0.1:1/v1", api_key_env="WL_TEST_KEY"))
    assert "\n" not in str(err.value) and "API key" in str(err.value)
    assert key not in str(err.value)


def test_url_credentials_leave_the_url_and_become_basic_auth():
    target = Target("http://alice:s3cr%40t@127.0.0.1:8000/v1")
    assert target.base_url == "http://127.0.0.1:8000/v1"
    assert "s3cr" not in repr(target)
    assert transport_for(target).headers["Authorization"] == "Basic YWxpY2U6czNjckB0"


def _echo_app() -> web.Application:
    """/v1/models lists one model; every chat request fails 401 with a body echoing the
    Authorization header it got (as some gateways do)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "echo"}]})

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {"error": f"invalid credentials: {request.headers.get('Authorization')}"}, status=401
        )

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_key_and_password_never_reach_any_output_file(
    serve_app, tiny_scenario, tmp_path, monkeypatch, no_proxy_env
):
    key, password = "sk-test-0123456789abcdef", "hunter2-pw"
    monkeypatch.setenv("WL_ECHO_KEY", key)
    scenario = tiny_scenario.with_overrides(["gate=off"])
    async with serve_app(_echo_app()) as root:
        host = root.removeprefix("http://")
        runs = {
            "key": Target(f"{root}/v1", api_key_env="WL_ECHO_KEY"),
            "userinfo": Target(f"http://bob:{password}@{host}/v1", api_key_env="WL_NO_KEY"),
        }
        for name, target in runs.items():
            result = await workloads.run_async(
                scenario, target, out_dir=tmp_path / name, transcripts=True
            )
            failed = [r for r in result.records if r.error_kind == "http_4xx"]
            assert failed and all("<redacted>" in (r.error_message or "") for r in failed)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "records.jsonl" for p in files)
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        assert key not in text, path
        assert password not in text, path
        assert "Ym9iOmh1bnRlcjItcHc" not in text, path  # base64 of bob:hunter2-pw


async def test_insecure_run_says_so_in_result_and_warnings(
    simulated_server, tls, tiny_scenario, tmp_path, no_proxy_env
):
    server_ctx, _ = tls
    async with _tls_relay(simulated_server.port, server_ctx) as port:
        target = Target(f"https://127.0.0.1:{port}/v1", insecure=True)
        result = await workloads.run_async(tiny_scenario, target, out_dir=tmp_path / "run")
    assert result.records and all(r.error_kind is None for r in result.records)
    assert result.target.insecure
    assert "--insecure" in result.environment["tls"]
    assert result.environment["arrival_stamps"] == "event loop"  # TLS: the loop's transport
    assert any("not verified (--insecure)" in w for w in result.warnings)


# --- a proxy that asks for credentials -------------------------------------------------------


@contextlib.asynccontextmanager
async def _auth_proxy(authorization: str, seen: list[tuple[str, bool]]) -> AsyncIterator[int]:
    """A forward proxy on 127.0.0.1 that answers 407 to a connection whose first request
    lacks ``Proxy-Authorization: {authorization}``, and otherwise carries it: CONNECT as a
    tunnel, an absolute-form request by relaying the connection's bytes to the origin. Each
    first request line, and whether it was let through, lands in ``seen``."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        given = [
            line.split(":", 1)[1].strip()
            for line in lines[1:]
            if line.lower().startswith("proxy-authorization:")
        ]
        allowed = given == [authorization]
        seen.append((lines[0], allowed))
        if not allowed:
            writer.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'Proxy-Authenticate: Basic realm="test"\r\nContent-Length: 0\r\n'
                b"Connection: close\r\n\r\n"
            )
            await writer.drain()
            writer.close()
            return
        origin = URL(f"//{target}" if method == "CONNECT" else target)
        assert origin.raw_host is not None and origin.port is not None
        try:
            up_reader, up_writer = await asyncio.open_connection(origin.raw_host, origin.port)
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(head)  # absolute form: the origin (aiohttp's server) reads it
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("where", ["--proxy", "HTTP_PROXY"])
async def test_a_run_through_a_proxy_that_asks_for_credentials_works_and_keeps_them(
    where, simulated_server, tiny_scenario, tmp_path, no_proxy_env
):
    user, password = "alice", "pr0xy-s3cret"
    token = "YWxpY2U6cHIweHktczNjcmV0"  # base64 of alice:pr0xy-s3cret
    seen: list[tuple[str, bool]] = []
    async with _auth_proxy(f"Basic {token}", seen) as port:
        proxy = f"http://{user}:{password}@127.0.0.1:{port}"
        target = simulated_server.target
        if where == "--proxy":
            target = Target(target.base_url, proxy=proxy)
        else:
            no_proxy_env.setenv("HTTP_PROXY", proxy)
        result = await workloads.run_async(tiny_scenario, target, out_dir=tmp_path / "run")
        # and a wrong password is the proxy's 407, said as the proxy's
        wrong = Target(target.base_url, proxy=f"http://{user}:nope@127.0.0.1:{port}")
        with pytest.raises(TargetError) as refused:
            await identify(wrong, 10)
    assert result.records and all(r.error_kind is None for r in result.records)
    assert (
        result.environment["proxy"]
        == f"http://127.0.0.1:{port} (from {where.replace('--proxy', 'Target.proxy')})"
    )
    carried = {line.split(" ", 2)[1].split("/", 3)[-1] for line, allowed in seen if allowed}
    assert {"v1/models", "v1/chat/completions", "metrics"} <= carried  # aiohttp's and ours
    assert "HTTP 407 through proxy" in str(refused.value)
    assert "refused the credentials" in str(refused.value) and "API key" not in str(refused.value)
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        text = path.read_bytes().decode("utf-8", "replace")
        assert password not in text and token not in text, path


async def test_https_through_a_proxy_that_asks_for_credentials(simulated_server, tls, no_proxy_env):
    server_ctx, ca_pem = tls
    seen: list[tuple[str, bool]] = []
    async with (
        _auth_proxy("Basic YWxpY2U6cHc=", seen) as proxy_port,  # alice:pw
        _tls_relay(simulated_server.port, server_ctx) as port,
    ):
        url = f"https://127.0.0.1:{port}/v1"
        target = Target(url, proxy=f"http://alice:pw@127.0.0.1:{proxy_port}", ca_bundle=ca_pem)
        transport = transport_for(target)
        model, _ = await identify(target, 30, transport)  # aiohttp's CONNECT
        async with HttpChatClient(url, transport=transport) as client:
            response = await client.stream_chat(_body(model))  # the stream's own CONNECT
    assert response.ok and response.text, response.error_message
    assert seen == [(f"CONNECT 127.0.0.1:{port} HTTP/1.1", True)] * 2


async def test_a_proxys_502_is_said_to_be_the_proxys(no_proxy_env):
    seen: list[tuple[str, bool]] = []
    async with _auth_proxy("Basic YWxpY2U6cHc=", seen) as proxy_port:
        # nothing listens on port 9 of 127.0.0.1: the proxy cannot reach the target
        target = Target("http://127.0.0.1:9/v1/", proxy=f"http://alice:pw@127.0.0.1:{proxy_port}")
        with pytest.raises(TargetError) as failed:
            await identify(target, 10)
    message = str(failed.value)
    assert message.startswith("http://127.0.0.1:9/v1/models answered HTTP 502 through proxy")
    assert "the proxy's own answer" in message and "API key" not in message


@pytest.mark.parametrize(
    ("proxy", "said"),
    [
        ("https://proxy.example:3128", "an https:// proxy is not supported"),
        ("socks5://u:pw@proxy.example:1080", "a socks5:// proxy is not supported"),
        ("http://u:a%0D%0AX-Injected:%201@proxy.example:3128", "the proxy URL's user:password"),
    ],
)
def test_proxy_urls_that_cannot_be_used_say_why(proxy, said):
    with pytest.raises(TargetError) as err:
        Transport(proxy=proxy)
    assert said in str(err.value) and "\n" not in str(err.value)
    assert ":pw@" not in str(err.value)
    if "socks5" in proxy:
        assert "https" not in str(err.value)


def test_line_breaks_in_url_credentials_are_not_called_the_api_key():
    with pytest.raises(TargetError) as err:
        transport_for(Target("http://bob:a%0D%0AX-Injected:%201@127.0.0.1:1/v1"))
    assert "the target URL's user:password" in str(err.value)
    assert "API key" not in str(err.value)


def _echo_cut_app(kept: int) -> web.Application:
    """Like _echo_app, but the 401's body ends with the Authorization header it got, placed
    so that the 300 characters a turn's error message keeps of it end ``kept`` characters
    into the key."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "echo"}]})

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            status=401, text="x" * (300 - len("Bearer ") - kept) + request.headers["Authorization"]
        )

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.mark.parametrize("kept", [12, 4])
async def test_a_key_cut_by_the_error_message_limit_leaves_no_start_of_it(
    kept, serve_app, tiny_scenario, tmp_path, monkeypatch, no_proxy_env
):
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("WL_ECHO_KEY", key)
    async with serve_app(_echo_cut_app(kept)) as root:
        target = Target(f"{root}/v1", api_key_env="WL_ECHO_KEY")
        result = await workloads.run_async(
            tiny_scenario.with_overrides(["gate=off"]), target, out_dir=tmp_path / "run"
        )
    failed = [r for r in result.records if r.error_kind == "http_4xx"]
    assert failed, [r.error_message for r in result.records]
    assert all("xBearer <red" in (r.error_message or "") for r in failed), failed[0].error_message
    records = (tmp_path / "run" / "records.jsonl").read_text()
    assert key[:4] not in records  # not even "sk-t"


def test_redact_takes_the_start_of_a_secret_off_a_cut_text():
    transport = Transport(secrets=("hunter2-pw",))
    assert transport.redact("denied: hunter2-pw and more") == "denied: <redacted> and more"
    assert transport.redact("denied: hunt") == "denied: <redacted>"
    assert transport.redact("denied: hun") == "denied: hun"  # 3 characters: the text's own


@contextlib.asynccontextmanager
async def _silent_server() -> AsyncIterator[int]:
    """Reads whatever comes and never answers: a plain-HTTP server waiting for the end of a
    request line that a TLS ClientHello never sends."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


async def test_https_to_a_port_that_never_answers_tls_says_it_may_be_plain_http(no_proxy_env):
    async with _silent_server() as port:
        url = f"https://127.0.0.1:{port}/v1"
        with pytest.raises(TargetError) as read:
            await identify(Target(url), 30, connect_s=0.5)
        async with HttpChatClient(url, timeouts=Timeouts(connect_s=0.5)) as client:
            response = await client.stream_chat(BODY)
    message = str(read.value)
    assert message.startswith(f"cannot reach {url}/models: no connection within 0.5 s")
    assert "never answered the TLS handshake" in message and "plain HTTP" in message
    assert response.error_kind == "connect_timeout"
    assert "plain HTTP" in (response.error_message or "")


async def test_a_target_ending_in_a_slash_is_named_without_a_double_slash(serve_app, no_proxy_env):
    async with serve_app(web.Application()) as root:  # answers 404 to everything
        with pytest.raises(TargetError) as failed:
            await identify(Target(f"{root}/v1/"), 10)
    assert str(failed.value).startswith(f"{root}/v1/models answered HTTP 404;")
