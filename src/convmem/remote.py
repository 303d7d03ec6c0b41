"""Calls to remote model endpoints (chat, embeddings): retries with jittered exponential
backoff on what a later attempt can fix (429, 5xx, timeouts, dropped connections), and
nothing else; a ``Retry-After`` the server sends is honoured (up to the cap)."""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from convmem.errors import InvalidInputError

if TYPE_CHECKING:  # imported where a call is made: `import convmem` does not load it
    import httpx

__all__ = ["RETRY_STATUSES", "Retry", "bearer", "error_detail", "post_json"]

logger = logging.getLogger(__name__)

#: Answers worth asking again: a timeout, too early or too many, and every 5xx but the two
#: no retry changes (501 Not Implemented, 505 HTTP Version Not Supported); gateways and
#: overloaded services answer 520-529.
RETRY_STATUSES = frozenset(
    {408, 425, 429, *(code for code in range(500, 600) if code not in (501, 505))}
)
SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


@dataclass(frozen=True)
class Retry:
    """How a remote call is retried: ``attempts`` in all, waits doubling from ``base_seconds``
    up to ``max_seconds``, each scaled by a random factor in [0.5, 1] (jitter)."""

    attempts: int = 4
    base_seconds: float = 0.5
    max_seconds: float = 8.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise InvalidInputError(
                f"retry.attempts must be a whole number >= 1, got {self.attempts!r}",
                field="retry.attempts",
            )
        for name in ("base_seconds", "max_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise InvalidInputError(
                    f"retry.{name} must be a number >= 0, got {value!r}", field=f"retry.{name}"
                )

    def delay(self, attempt: int, response: httpx.Response | None) -> float:
        wait: float = min(self.max_seconds, self.base_seconds * 2**attempt) * random.uniform(
            0.5, 1.0
        )
        after = response.headers.get("retry-after") if response is not None else None
        # ASCII digits only: str.isdigit() takes "²", which float() refuses; an HTTP date
        # or anything else keeps the backoff
        if after is not None and SECONDS.fullmatch(after.strip()):
            wait = min(self.max_seconds, max(wait, float(after)))
        return wait


def bearer(api_key: str | None) -> dict[str, str]:
    """The ``Authorization`` header of an API key (none without one). Blanks around it are
    dropped; a key holding any other character outside printable ASCII is refused without
    showing it (httpx would put it in an error message, and errors reach job records)."""
    if api_key is None or not api_key.strip():
        return {}
    key = api_key.strip()
    if any(not " " < ch <= "~" for ch in key):
        raise InvalidInputError(
            f"api_key holds a character no HTTP header can carry ({len(key)} characters; "
            "a line break or a space inside it?); check how it was copied",
            field="api_key",
        )
    return {"Authorization": f"Bearer {key}"}


def post_json(
    client: httpx.Client,
    path: str,
    body: Any,
    *,
    retry: Retry,
    sleep: Callable[[float], None] = time.sleep,
) -> httpx.Response:
    """POST ``body``; the last answer, or the last transport error raised, after retries."""
    import httpx

    for attempt in range(retry.attempts):
        last = attempt == retry.attempts - 1
        try:
            response = client.post(path, json=body)
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError):
            raise  # a URL or a request no retry mends
        except (httpx.TimeoutException, httpx.TransportError) as exc:
            if last:
                raise
            logger.info("retrying %s after %s", path, type(exc).__name__)
            sleep(retry.delay(attempt, None))
            continue
        if response.status_code not in RETRY_STATUSES or last:
            return response
        logger.info("retrying %s after HTTP %d", path, response.status_code)
        sleep(retry.delay(attempt, response))
    raise AssertionError("unreachable: the last attempt returns or raises")


#: How much of an error answer is shown, and the shortest run of a sent text that counts
#: as quoted back.
DETAIL_CHARS, QUOTE_CHARS = 200, 12


def error_detail(response: httpx.Response, sent: Sequence[str]) -> str:
    """What an endpoint's error answer says, for an exception message, without the texts
    that were sent: validation errors (FastAPI's 422, pydantic's ``input``) echo the
    request, and the message ends up in logs and in a job's ``error_message``, which hold
    no memory text. A JSON body gives its message fields only; any body that still quotes
    a sent text is left out."""
    try:
        detail = _json_detail(response.json())
    except ValueError:
        detail = response.text
    detail = " ".join(detail.split())[:DETAIL_CHARS]
    if _quotes(detail, sent):
        return "(its answer quotes the text sent, not shown)"
    return detail


def _json_detail(payload: Any) -> str:
    if not isinstance(payload, dict):
        return str(payload)
    parts: list[str] = []
    for key in ("error", "message", "detail"):
        value = payload.get(key)
        if isinstance(value, dict):  # OpenAI: {"error": {"message", "type", "code"}}
            value = value.get("message") or value.get("type") or value.get("code")
        if isinstance(value, list):  # FastAPI / pydantic: [{"loc", "msg", "input"}, ...]
            value = "; ".join(
                f"{'.'.join(map(str, item.get('loc', [])))}: {item.get('msg', '')}"
                for item in value
                if isinstance(item, dict)
            )
        if value:
            parts.append(str(value))
    return " ".join(parts) or "(no message)"


def _quotes(detail: str, sent: Sequence[str]) -> bool:
    for text in sent:
        text = " ".join(text.split())
        if len(text) < QUOTE_CHARS:
            if len(text) > 1 and text in detail:
                return True
            continue
        if any(
            text[start : start + QUOTE_CHARS] in detail
            for start in range(len(text) - QUOTE_CHARS + 1)
        ):
            return True
    return False
