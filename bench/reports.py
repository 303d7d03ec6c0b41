"""Writing a bench script's report: one place for every script's ``--out``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save(report: Any, out: Path | None, *, ascii_only: bool = False) -> None:
    """``report`` as indented JSON in ``out`` (its folder made); nothing when ``out`` is
    None. ``ascii_only``: escape non-ASCII characters."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, ensure_ascii=ascii_only, indent=2), encoding="utf-8")
