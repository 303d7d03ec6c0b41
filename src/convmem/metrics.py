"""In-process counters and histograms (rendered as Prometheus text by the HTTP server)."""

from __future__ import annotations

import bisect
import threading
from collections import deque

__all__ = ["Counter", "Histogram"]

DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Counter:
    """A monotonically increasing count."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self._value += amount

    @property
    def value(self) -> float:
        return self._value


class Histogram:
    """Bucketed observations plus a window of recent values for quantiles."""

    def __init__(
        self, name: str, buckets: tuple[float, ...] = DEFAULT_BUCKETS, window: int = 2048
    ) -> None:
        self.name = name
        self.buckets = buckets
        self.bucket_counts = [0] * (len(buckets) + 1)
        self.count = 0
        self.total = 0.0
        self._recent: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self.bucket_counts[bisect.bisect_left(self.buckets, value)] += 1
            self.count += 1
            self.total += value
            self._recent.append(value)

    def quantile(self, q: float) -> float | None:
        """The q-quantile of recent observations, or None when there are none."""
        with self._lock:
            values = sorted(self._recent)
        if not values:
            return None
        return values[min(len(values) - 1, int(q * len(values)))]

    def summary(self) -> dict[str, float | int | None]:
        return {
            "count": self.count,
            "sum": round(self.total, 6),
            "p50": self.quantile(0.5),
            "p99": self.quantile(0.99),
        }
