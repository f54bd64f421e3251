"""The correctness gate's pass against a target that serves no chat completions: the run
stops there, in one line, instead of measuring every turn's failure."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web

from fakes import TINY_RUN
from workloads.cli import main

# A front page that a web server (or a proxy in front of the wrong port) answers with.
PAGE = (
    "<!DOCTYPE html><html><head><title>501 Not Implemented</title></head><body>"
    + ("<p>The requested method is not implemented.</p>" * 40)
    + "</body></html>"
)


@pytest.fixture
def lists_models_serves_no_chat() -> Iterator[str]:
    """An aiohttp server on 127.0.0.1 that lists one model and answers every other request
    501 with an HTML page; yields its base URL."""
    started = threading.Event()
    state: dict[str, object] = {}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def not_implemented(request: web.Request) -> web.Response:
        return web.Response(status=501, text=PAGE, content_type="text/html")

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_route("*", "/{tail:.*}", not_implemented)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    def serve() -> None:
        loop = asyncio.new_event_loop()
        runner = loop.run_until_complete(start())
        state.update(loop=loop, port=runner.addresses[0][1])
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{state['port']}/v1"
    loop = state["loop"]
    assert isinstance(loop, asyncio.AbstractEventLoop)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@pytest.mark.parametrize("gate", ["report", "off"])
def test_a_target_that_lists_models_but_answers_501_stops_in_one_line_exit_4(
    lists_models_serves_no_chat, tmp_path, capsys, gate
):
    # It ran to its end (exit 3) and pasted six HTML pages into the correctness line. With
    # the gate off, the first repetition's turns tell the same.
    code = main(
        [
            "run",
            "five-user-coding",
            "--target",
            lists_models_serves_no_chat,
            *TINY_RUN,
            "--set",
            f"gate={gate}",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 4
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "/v1/chat/completions answered HTTP 501 Not Implemented" in line
    assert "serves no chat completions" in line
    assert "<" not in err  # no HTML
