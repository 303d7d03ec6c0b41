"""Any OpenAI-compatible ``/embeddings`` endpoint."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from convmem.embed.base import Vectors, normalise_rows
from convmem.errors import EmbedderError
from convmem.remote import Retry, bearer, error_detail, post_json

if TYPE_CHECKING:  # imported when an embedder is made: `import convmem` does not load it
    import httpx

__all__ = ["OpenAIEmbedder"]

logger = logging.getLogger(__name__)


class OpenAIEmbedder:
    """Embeds through ``POST {base_url}/embeddings``.

    Args:
        base_url: for example ``https://api.example.com/v1`` or a local server.
        model: the model name the endpoint expects.
        api_key: sent as a bearer token when given.
        dimension: the vector size; probed with one request when not given.
        retry: retries of 429, 5xx, timeouts and dropped connections (jittered backoff).
        request_dimensions: send ``dimensions`` (models that shorten their vectors).
        transport: an ``httpx`` transport (tests pass a local one).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        dimension: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        retry: Retry | None = None,
        request_dimensions: bool = False,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        import httpx

        headers = bearer(api_key)
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self._model = model
        self._base_url = base_url
        self._batch_size = batch_size
        self._dimension = dimension
        self._retry = retry or Retry()
        # models that can shorten their vectors (text-embedding-3) are asked for `dimension`
        self._request_dimensions = request_dimensions and dimension is not None

    @property
    def model_id(self) -> str:
        return f"openai:{self._model}"

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def _request(self, batch: list[str]) -> Vectors:
        import httpx

        try:
            body: dict[str, Any] = {"model": self._model, "input": batch}
            if self._request_dimensions:
                body["dimensions"] = self._dimension
            response = post_json(self._client, "/embeddings", body, retry=self._retry)
        except httpx.HTTPError as exc:
            raise EmbedderError(f"Embedding endpoint {self._base_url} failed: {exc}") from exc
        if response.status_code != 200:
            raise EmbedderError(
                f"Embedding endpoint {self._base_url} answered {response.status_code}: "
                f"{error_detail(response, batch)}"
            )
        try:
            payload: Any = response.json()
            items = sorted(payload["data"], key=lambda item: item["index"])
            matrix = np.asarray([item["embedding"] for item in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(
                f"Embedding endpoint {self._base_url} returned an unexpected body: {exc}"
            ) from exc
        if matrix.ndim != 2:
            raise EmbedderError(
                f"Embedding endpoint {self._base_url} returned vectors of shape "
                f"{matrix.shape[1:]} (ragged or nested), not one flat vector per text"
            )
        if matrix.shape[0] != len(batch):
            raise EmbedderError(
                f"Embedding endpoint {self._base_url} returned {matrix.shape[0]} vectors "
                f"for {len(batch)} texts"
            )
        if self._dimension is not None and matrix.shape[1] != self._dimension:
            raise EmbedderError(
                f"Embedding endpoint {self._base_url} returned {matrix.shape[1]}-d vectors; "
                f"this embedder is {self._dimension}-d (the model or its settings changed?)"
            )
        logger.info("embedded %d texts via %s", len(batch), self._base_url)
        return matrix

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self._batch_size):
            # each batch is checked against the dimension (the first batch's, when the
            # embedder was made without one): batches that disagree are an EmbedderError
            part = self._request(list(texts[start : start + self._batch_size]))
            if self._dimension is None:
                self._dimension = int(part.shape[1])
            parts.append(part)
        return normalise_rows(np.concatenate(parts, axis=0))

    def close(self) -> None:
        self._client.close()
