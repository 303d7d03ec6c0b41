"""Calls to remote model endpoints (chat, embeddings): retries with jittered exponential
backoff on what a later attempt can fix (429, 5xx, timeouts, dropped connections), and
nothing else; a ``Retry-After`` the server sends is honoured (up to the cap)."""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a call is made: `import convmem` does not load it
    import httpx

__all__ = ["RETRY_STATUSES", "Retry", "post_json"]

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


@dataclass(frozen=True)
class Retry:
    """How a remote call is retried: ``attempts`` in all, waits doubling from ``base_seconds``
    up to ``max_seconds``, each scaled by a random factor in [0.5, 1] (jitter)."""

    attempts: int = 4
    base_seconds: float = 0.5
    max_seconds: float = 8.0

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
