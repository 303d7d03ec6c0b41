"""The convmem exception tree.

Every error convmem raises on purpose derives from :class:`ConvmemError`; each also
derives from the builtin a caller would naturally catch::

    ConvmemError
    ├── InvalidInputError (ValueError)        bad turns, filters, hints, ranges; names the field
    │   ├── TurnConflictError                 a turn id already stored with other text
    │   └── FilterError                       an unknown filter key, operator or value type
    ├── NotFoundError (LookupError)           no such job, chunk, conversation
    ├── EmbeddingMismatchError                the store was built with another model or dimension
    ├── EmbedderError (RuntimeError)          a model could not be loaded or failed to embed
    ├── MarkingError (RuntimeError)           a Stage 2 marker failed or returned invalid marks
    ├── StoreError (RuntimeError)             the store failed or is closed
    └── FlushTimeoutError (TimeoutError)      the index backlog did not drain in time

Messages say what happened, the offending value, and the fix.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConvmemError",
    "EmbedderError",
    "EmbeddingMismatchError",
    "FilterError",
    "FlushTimeoutError",
    "InvalidInputError",
    "MarkingError",
    "NotFoundError",
    "StoreError",
    "TurnConflictError",
]


class ConvmemError(Exception):
    """Root of every error convmem raises on purpose."""


class InvalidInputError(ConvmemError, ValueError):
    """Input was rejected; nothing from the rejected call was stored.

    Attributes:
        field: the first offending field, as a path such as ``turns[3].text``.
        errors: every problem found, each ``{"field", "message"}``.
    """

    def __init__(
        self, message: str, *, field: str | None = None, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.field = field
        self.errors = errors if errors is not None else [{"field": field, "message": message}]


class TurnConflictError(InvalidInputError):
    """A turn id is already stored with different text (turns are immutable once accepted)."""


class FilterError(InvalidInputError):
    """A search filter names an unknown field or operator, or a value of the wrong type."""


class NotFoundError(ConvmemError, LookupError):
    """The job, chunk or conversation does not exist in this tenant."""


class EmbeddingMismatchError(ConvmemError):
    """The store holds vectors from another embedding model or dimension."""


class EmbedderError(ConvmemError, RuntimeError):
    """An embedding model could not be loaded, or failed on a batch."""


class MarkingError(ConvmemError, RuntimeError):
    """A Stage 2 marker failed (endpoint down, malformed or invalid output); the job retries.

    Attributes:
        code: ``marker_unavailable``, ``marker_bad_json`` or ``marker_invalid_marks``;
            recorded as the job's ``error_code``.
        errors: the validation problems, each ``{"code", "turn_id", "field", "message"}``.
    """

    def __init__(
        self, message: str, *, code: str, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.errors = errors or []


class StoreError(ConvmemError, RuntimeError):
    """The store failed, or was used after close."""


class FlushTimeoutError(ConvmemError, TimeoutError):
    """``flush`` gave up while index jobs were still pending."""


# The errors that cross the HTTP service, most specific first: (class, status, type name).
# The server answers an exception with the first row it is an instance of; the client
# raises the row's class for the body's ``type``. One table, so the two never drift.
WIRE: tuple[tuple[type[ConvmemError], int, str], ...] = (
    (TurnConflictError, 409, "turn_conflict"),
    (InvalidInputError, 422, "invalid_input"),
    (NotFoundError, 404, "not_found"),
    (EmbeddingMismatchError, 409, "embedding_mismatch"),
    (FlushTimeoutError, 504, "flush_timeout"),
    (StoreError, 503, "store_unavailable"),
    (EmbedderError, 503, "embedder_unavailable"),
)
