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


def test_importing_the_library_loads_no_http_client() -> None:
    """httpx is loaded by what calls a remote endpoint (the OpenAI-compatible embedder, the
    chat client, the HTTP client), not by ``import convmem``: it brought some 10,000
    objects that every full collection of the garbage collector walked in every process."""
    import subprocess
    import sys

    code = "import sys, convmem; print('httpx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
