"""A small client for OpenAI-compatible chat endpoints that must answer JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import json_repair

from convmem.errors import ConvmemError
from convmem.remote import Retry, bearer, error_detail, post_json

if TYPE_CHECKING:  # imported when a client is made: `import convmem` does not load it
    import httpx

__all__ = ["ChatClient", "ChatError", "ChatOptions", "parse_json_answer"]

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class ChatError(ConvmemError):
    """The endpoint failed (``kind="unavailable"``) or did not answer JSON (``"bad_json"``)."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def parse_json_answer(content: str) -> Any:
    """The JSON a model meant: reasoning (``<think>...</think>``) and Markdown fences are
    stripped, near-JSON (trailing commas, single quotes, a missing brace) is repaired.

    Raises:
        ValueError: nothing JSON-like is left.
    """
    text = _THINK.sub("", content).strip()
    try:  # the whole answer first: a string in valid JSON may hold a ``` fence
        return json.loads(text)
    except ValueError:
        pass
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except ValueError:
        repaired = json_repair.loads(text)
    if not isinstance(repaired, dict | list) or not repaired:
        raise ValueError(f"no JSON object in the answer: {content[:80]!r}")
    return repaired


class ChatOptions(TypedDict, total=False):
    """How to reach the endpoint, for classes that build their own :class:`ChatClient`."""

    api_key: str | None
    timeout: float
    retry: Retry | None
    extra_body: Mapping[str, Any] | None
    transport: httpx.BaseTransport | None


class ChatClient:
    """``POST {base_url}/chat/completions`` asking for a JSON object.

    Args:
        timeout: seconds per attempt.
        retry: retries of 429, 5xx, timeouts and dropped connections (jittered backoff).
        extra_body: fields merged into every request (provider options such as
            ``{"enable_thinking": false}``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: Retry | None = None,
        extra_body: Mapping[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        headers = bearer(api_key)
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self.base_url = base_url
        self.model = model
        self.retry = retry or Retry()
        self.extra_body = dict(extra_body or {})
        # servers that refuse response_format (400) are asked without it from then on
        self._json_mode = True

    def json(self, system: str, user: str) -> Any:
        return self.json_messages(
            [{"role": "system", "content": system}, {"role": "user", "content": user}]
        )

    def json_messages(self, messages: list[dict[str, str]]) -> Any:
        response = self._post(messages)
        if response.status_code == 400 and self._json_mode and "response_format" in response.text:
            self._json_mode = False  # the server lacks JSON mode: ask in the prompt alone
            response = self._post(messages)
        if response.status_code != 200:
            raise ChatError(
                f"chat endpoint {self.base_url} answered {response.status_code}: "
                f"{error_detail(response, [m['content'] for m in messages])}",
                kind="unavailable",
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
            return parse_json_answer(str(content))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(
                f"chat endpoint {self.base_url} did not answer JSON: {exc}", kind="bad_json"
            ) from None

    def _post(self, messages: list[dict[str, str]]) -> httpx.Response:
        import httpx

        body: dict[str, Any] = {"model": self.model, "temperature": 0, "messages": messages}
        if self._json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra_body)
        try:
            return post_json(self._client, "/chat/completions", body, retry=self.retry)
        except httpx.HTTPError as exc:
            raise ChatError(
                f"chat endpoint {self.base_url} failed: {exc}", kind="unavailable"
            ) from exc

    def close(self) -> None:
        self._client.close()

    @classmethod
    def from_config(cls, config: Any) -> ChatClient:
        """From ``{"base_url", "model", "api_key"?}``."""
        if not isinstance(config, dict) or not config.get("base_url") or not config.get("model"):
            from convmem.errors import InvalidInputError

            raise InvalidInputError('llm needs {"base_url": ..., "model": ...}', field="llm")
        return cls(config["base_url"], config["model"], api_key=config.get("api_key"))
