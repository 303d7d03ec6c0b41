"""A small client for OpenAI-compatible chat endpoints that must answer JSON."""

from __future__ import annotations

import json
from typing import Any

import httpx

from convmem.errors import ConvmemError

__all__ = ["ChatClient", "ChatError"]


class ChatError(ConvmemError):
    """The endpoint failed (``kind="unavailable"``) or did not answer JSON (``"bad_json"``)."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class ChatClient:
    """``POST {base_url}/chat/completions`` with ``response_format: json_object``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self.base_url = base_url
        self.model = model

    def json(self, system: str, user: str) -> Any:
        return self.json_messages(
            [{"role": "system", "content": system}, {"role": "user", "content": user}]
        )

    def json_messages(self, messages: list[dict[str, str]]) -> Any:
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": messages,
        }
        try:
            response = self._client.post("/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise ChatError(
                f"chat endpoint {self.base_url} failed: {exc}", kind="unavailable"
            ) from exc
        if response.status_code != 200:
            raise ChatError(
                f"chat endpoint {self.base_url} answered {response.status_code}: "
                f"{response.text[:200]}",
                kind="unavailable",
            )
        try:
            return json.loads(response.json()["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(
                f"chat endpoint {self.base_url} did not answer JSON: {exc}", kind="bad_json"
            ) from None

    def close(self) -> None:
        self._client.close()

    @classmethod
    def from_config(cls, config: Any) -> ChatClient:
        """From ``{"base_url", "model", "api_key"?}``."""
        if not isinstance(config, dict) or not config.get("base_url") or not config.get("model"):
            from convmem.errors import InvalidInputError

            raise InvalidInputError('llm needs {"base_url": ..., "model": ...}', field="llm")
        return cls(config["base_url"], config["model"], api_key=config.get("api_key"))
