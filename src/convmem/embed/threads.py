"""One BLAS thread while convmem multiplies small matrices.

A search multiplies a question's vector with a few hundred line vectors, the background
sets and the ranker's weights: products of a few microseconds. numpy's OpenBLAS splits
each over every core, and its helper threads then spin for about a tenth of a second,
waiting for the next product. A process that searches every few tens of milliseconds
keeps them spinning: on 2 cores a search cost 35 ms of CPU for 17 ms of work, and two
processes searching side by side each took twice as long (`bench/README.md`, stop 48).

:func:`one_blas_thread` limits BLAS to one thread while a search runs and gives the
host's setting back after it (``threadpoolctl``). OpenBLAS's limit is process-wide, and
``threadpoolctl`` lets one thread at a time change it: where several threads search at
once, a search that starts while another holds the limit runs with whatever that one
set. A process that convmem owns (``convmem serve``, ``convmem mcp``) therefore limits
BLAS for good at start-up (:func:`one_blas_thread_for_process`), from its main thread. A
library never does that for its host. Without ``threadpoolctl`` both do nothing.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

__all__ = ["one_blas_thread", "one_blas_thread_for_process"]

logger = logging.getLogger(__name__)

_controller: Any = None


def _blas() -> Any:
    """The process's thread-pool controller, found once (scanning the loaded libraries
    costs milliseconds): it limits the BLAS libraries loaded by the first search, numpy's
    among them, which is the one convmem multiplies with. None without ``threadpoolctl``."""
    global _controller
    if _controller is None:
        try:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
        except Exception:  # not installed, or a library it cannot read: search as before
            logger.debug("BLAS threads left as they are", exc_info=True)
            _controller = False
    return _controller or None


def _one_thread() -> Any:
    """Limit BLAS to one thread now; returns what restores the setting it found (a
    context), or None where nothing was limited (no controller, or a library that will not
    be limited: the search runs as before)."""
    controller = _blas()
    if controller is None:
        return None
    try:
        return controller.limit(limits=1, user_api="blas")
    except Exception:
        logger.debug("BLAS threads left as they are", exc_info=True)
        return None


def one_blas_thread() -> contextlib.AbstractContextManager[Any]:
    """A context that runs BLAS on one thread while it is open and restores the setting
    it found when it closes."""
    limiter = _one_thread()
    return contextlib.nullcontext() if limiter is None else limiter


def one_blas_thread_for_process() -> bool:
    """Run BLAS on one thread from now on, for the whole process; call it from the main
    thread of a process that convmem owns. Returns whether a limit was set (it is kept:
    never restored)."""
    return _one_thread() is not None
