"""The chat client against the reply shapes real model servers send."""

from __future__ import annotations

import json

import pytest

from convmem.chat import ChatClient, ChatError, parse_json_answer
from convmem.embed.openai import OpenAIEmbedder
from convmem.errors import InvalidInputError, MarkingError
from convmem.governance import LLMMarker, MarkTurn
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


def test_valid_json_holding_a_fence_in_a_string_is_read_whole() -> None:
    answer = {"marks": [{"turn_id": 1, "keep": False, "reason": "贴了代码 ```print(1)``` "}]}
    assert parse_json_answer(json.dumps(answer, ensure_ascii=False)) == answer


@pytest.mark.parametrize("status", [520, 524, 529])
def test_every_retryable_5xx_is_retried(status: int) -> None:
    script = Script(replies=[(status, ""), (200, '{"keep": true, "reason": "preference"}')])
    with openai_server(script) as url:
        assert ChatClient(url, "m", retry=FAST).json("s", "u") == WANT
    assert len(script.requests) == 2
    script = Script(replies=[(501, "")])  # not implemented: no retry changes it
    with openai_server(script) as url, pytest.raises(ChatError):
        ChatClient(url, "m", retry=FAST).json("s", "u")
    assert len(script.requests) == 1


def test_a_bad_url_or_key_is_refused_at_once_and_the_key_never_shown() -> None:
    with pytest.raises(ChatError) as caught:
        ChatClient("htp://127.0.0.1:9/v1", "m", retry=Retry(attempts=4, base_seconds=5)).json(
            "s", "u"
        )  # no retry mends a URL: this returns at once, not after 4 backoffs
    assert caught.value.kind == "unavailable"
    with pytest.raises(InvalidInputError) as refused:
        ChatClient("http://127.0.0.1:9/v1", "m", api_key="sk-SECRET123456\nX")
    assert refused.value.field == "api_key" and "SECRET" not in str(refused.value)
    with pytest.raises(InvalidInputError) as refused:
        OpenAIEmbedder("http://127.0.0.1:9/v1", "m", api_key="sk-SECRET\t1")
    assert "SECRET" not in str(refused.value)
    ChatClient("http://127.0.0.1:9/v1", "m", api_key="sk-SECRET123456\n")  # a trailing newline
    with pytest.raises(InvalidInputError) as refused:
        Retry(attempts=0)
    assert refused.value.field == "retry.attempts"


def test_llm_marker_refuses_unusable_turn_ids_and_sends_no_context_when_asked() -> None:
    turns = [MarkTurn(9, 9, "user", "我喜欢靠窗的座位", 0.0)]
    context = [MarkTurn(i, i, "user", f"第{i}句", 0.0) for i in range(8)]
    bad = json.dumps({"marks": [{"turn_id": [9], "keep": True, "reason": "x"}]})
    with openai_server(Script(replies=[(200, bad)])) as url:
        with pytest.raises(MarkingError) as caught:
            LLMMarker(url, "m", retry=FAST).mark(turns, context)
        assert caught.value.code == "marker_invalid_marks"
    script = Script(replies=[(200, bad)])
    with openai_server(script) as url, pytest.raises(MarkingError):
        LLMMarker(url, "m", retry=FAST, context_turns=0).mark(turns, context)
    prompt = json.dumps(script.requests[0]["messages"], ensure_ascii=False)
    assert "第0句" not in prompt and "第7句" not in prompt and "靠窗" in prompt
