"""Local transformer embedders (BERT-style encoders), loaded from disk only, never downloaded.

Pooling follows the sentence-transformers folder layout when present
(``1_Pooling/config.json``: CLS for bge, mean for MiniLM); otherwise mean pooling.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from convmem.embed.base import Vectors, normalise_rows
from convmem.errors import EmbedderError

__all__ = ["TransformerEmbedder", "default_model_cache", "find_cached_model"]

logger = logging.getLogger(__name__)


def default_model_cache() -> Path:
    """Where Hugging Face tools keep downloaded models, by their own settings: ``HF_HUB_CACHE``,
    then ``TRANSFORMERS_CACHE``, then ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    for variable in ("HF_HUB_CACHE", "TRANSFORMERS_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def find_cached_model(name: str, *, cache_dir: Path | None = None) -> Path | None:
    """Find a Hugging Face model already on disk (``org/name``), or ``None``.

    Looks in ``cache_dir`` (default :func:`default_model_cache`, which honours ``HF_HOME``
    and ``TRANSFORMERS_CACHE``) for a snapshot that has a ``config.json``. Never touches
    the network.
    """
    root = cache_dir if cache_dir is not None else default_model_cache()
    snapshots = root / ("models--" + name.replace("/", "--")) / "snapshots"
    if not snapshots.is_dir():
        return None
    for snapshot in sorted(snapshots.iterdir()):
        if (snapshot / "config.json").is_file():
            return snapshot
    return None


class TransformerEmbedder:
    """A local encoder model run with ``transformers`` + ``torch`` on the CPU (or a device).

    Args:
        path: a folder holding ``config.json``, the weights and the tokenizer files.
        model_id: what the store records (default: the folder name).
        max_length: tokens per text; longer texts are truncated.
        batch_size: texts per forward pass.
        pooling: ``"mean"``, ``"cls"`` or ``None`` to read the folder's pooling config.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        model_id: str | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        pooling: str | None = None,
        device: str = "cpu",
    ) -> None:
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise EmbedderError(
                f"No model at {folder}: config.json is missing. Point to a folder with the "
                "model's config, weights and tokenizer files (models are never downloaded)."
            )
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise EmbedderError(
                "Local transformer models need the 'models' extra: "
                "pip install torch==2.13.0 && pip install 'convmem[models]'"
            ) from exc
        self._torch: Any = torch
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            self._model = AutoModel.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:  # transformers raises many types; name them in ours
            raise EmbedderError(f"Could not load the model at {folder}: {exc}") from exc
        self._model.eval()
        self._model.to(device)
        self._device = device
        self._pooling = pooling or self._read_pooling(folder)
        if self._pooling not in ("mean", "cls"):
            raise EmbedderError(f"pooling must be 'mean' or 'cls', got {self._pooling!r}")
        # never past the model's position table: a longer text made torch raise mid-reindex
        self._max_length = min(max_length, self._positions(self._model.config, self._tokenizer))
        self._batch_size = batch_size
        self._model_id = model_id or folder.name
        self._dimension = int(self._model.config.hidden_size)
        self._lock = threading.Lock()
        logger.info(
            "loaded embedding model %s (dim %d, pooling %s) from %s",
            self._model_id,
            self._dimension,
            self._pooling,
            folder,
        )

    @staticmethod
    def _positions(config: Any, tokenizer: Any) -> int:
        """The most tokens the model takes: its position table (less the padding offset
        RoBERTa-style models reserve in it), or the tokenizer's limit when that is lower."""
        limit = int(getattr(config, "max_position_embeddings", 0) or 0) or 1 << 30
        if "roberta" in str(getattr(config, "model_type", "")):
            limit -= int(getattr(config, "pad_token_id", 1) or 1) + 1
        declared = getattr(tokenizer, "model_max_length", None)
        if isinstance(declared, int) and 0 < declared < limit:
            limit = declared
        return limit

    @staticmethod
    def _read_pooling(folder: Path) -> str:
        config = folder / "1_Pooling" / "config.json"
        if config.is_file():
            data = json.loads(config.read_text(encoding="utf-8"))
            if data.get("pooling_mode_cls_token"):
                return "cls"
        return "mean"

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        torch = self._torch
        parts = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                encoded = self._tokenizer(
                    batch,
                    padding=True,
                    truncation=True,
                    max_length=self._max_length,
                    return_tensors="pt",
                ).to(self._device)
                hidden = self._model(**encoded).last_hidden_state
                if self._pooling == "cls":
                    pooled = hidden[:, 0]
                else:
                    mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                parts.append(pooled.float().cpu().numpy())
        return normalise_rows(np.concatenate(parts, axis=0))
