"""One public namespace, sorted, with every name importable."""

from __future__ import annotations

import convmem
from convmem import errors


def test_all_is_sorted_and_importable() -> None:
    assert convmem.__all__ == sorted(convmem.__all__)
    for name in convmem.__all__:
        assert hasattr(convmem, name), name


def test_exception_tree() -> None:
    assert issubclass(errors.InvalidInputError, ValueError)
    assert issubclass(errors.TurnConflictError, errors.InvalidInputError)
    assert issubclass(errors.FilterError, errors.InvalidInputError)
    assert issubclass(errors.NotFoundError, LookupError)
    assert issubclass(errors.FlushTimeoutError, TimeoutError)
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ConvmemError)
