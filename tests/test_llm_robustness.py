"""The chat client against the reply shapes real model servers send."""

from __future__ import annotations

import pytest

from convmem.chat import ChatClient, ChatError, parse_json_answer
from convmem.remote import Retry
from openai_fake import Script, openai_server

FAST = Retry(attempts=3, base_seconds=0.01, max_seconds=0.02)
WANT = {"keep": True, "reason": "preference"}


@pytest.mark.parametrize(
    "content",
    [
        '{"keep": true, "reason": "preference"}',
        '```json\n{"keep": true, "reason": "preference"}\n```',
        'Here it is:\n```\n{"keep": true, "reason": "preference"}\n```\nDone.',
        '<think>The user states a preference, so keep.</think>\n{"keep": true, "reason": "preference"}',
        '<think>hmm</think>```json\n{"keep": true, "reason": "preference",}\n```',
        "{'keep': true, 'reason': 'preference'}",
        '{"keep": true, "reason": "preference"',
    ],
    ids=[
        "plain",
        "fenced",
        "prose-fenced",
        "think",
        "think-fenced-trailing-comma",
        "single-quotes",
        "unclosed",
    ],
)
def test_real_world_json_shapes_are_understood(content: str) -> None:
    with openai_server(Script(replies=[(200, content)])) as url:
        client = ChatClient(url, "m", retry=FAST)
        assert client.json("system", "user") == WANT


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_failures_are_retried(status: int) -> None:
    script = Script(replies=[(status, ""), (200, '{"keep": true, "reason": "preference"}')])
    with openai_server(script) as url:
        assert ChatClient(url, "m", retry=FAST).json("s", "u") == WANT
    assert len(script.requests) == 2


def test_a_server_without_json_mode_is_asked_without_it_from_then_on() -> None:
    script = Script(
        replies=[(200, '{"keep": true, "reason": "preference"}')], refuse_response_format=True
    )
    with openai_server(script) as url:
        client = ChatClient(url, "m", retry=FAST, extra_body={"enable_thinking": False})
        assert client.json("s", "u") == WANT
        assert client.json("s", "u") == WANT
    assert ["response_format" in body for body in script.requests] == [True, False, False]
    assert all(body["enable_thinking"] is False for body in script.requests)  # extra_body sent


def test_garbage_and_lasting_failures_are_errors_of_their_kind() -> None:
    with openai_server(Script(replies=[(200, "I cannot help with that.")])) as url:
        with pytest.raises(ChatError) as caught:
            ChatClient(url, "m", retry=FAST).json("s", "u")
        assert caught.value.kind == "bad_json"
    script = Script(replies=[(503, "")])
    with openai_server(script) as url:
        with pytest.raises(ChatError) as caught:
            ChatClient(url, "m", retry=FAST).json("s", "u")
        assert caught.value.kind == "unavailable" and "503" in str(caught.value)
    assert len(script.requests) == FAST.attempts  # retried, then given up
    with pytest.raises(ValueError, match="no JSON"):
        parse_json_answer("<think>only thoughts</think>")
