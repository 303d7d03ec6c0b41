"""Prometheus text exposition of the engine's instruments and the request timings."""

from __future__ import annotations

from collections.abc import Mapping

from convmem import Memory
from convmem.metrics import Counter, Histogram

__all__ = ["render_prometheus"]

HELP = {
    "chunks_ingested_total": "chunks written by this process's index workers",
    "upsert_failures_total": "failed index writes",
    "job_retries_total": "index job failures that were scheduled for retry",
    "turns_accepted_total": "turns stored durably",
    "scene_context_degraded_parts_total": "scene memory context parts that failed and were left empty",
    "degraded_searches_total": "hybrid searches answered lexically because the embedder failed",
    "search_seconds": "search latency",
    "index_batch_seconds": "latency of one index worker pass",
    "embedding_seconds": "latency of one embedding batch",
}


def _histogram(name: str, histogram: Histogram, labels: str = "") -> list[str]:
    lines = []
    cumulative = 0
    sep = "," if labels else ""
    for bound, count in zip(histogram.buckets, histogram.bucket_counts, strict=False):
        cumulative += count
        lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
    lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {histogram.count}')
    suffix = f"{{{labels}}}" if labels else ""
    lines.append(f"{name}_sum{suffix} {histogram.total}")
    lines.append(f"{name}_count{suffix} {histogram.count}")
    return lines


def render_prometheus(memory: Memory, request_seconds: Mapping[tuple[str, str], Histogram]) -> str:
    lines: list[str] = []
    for short, instrument in sorted(memory.instruments().items()):
        name = f"convmem_{short}"
        lines.append(f"# HELP {name} {HELP.get(short, short)}")
        if isinstance(instrument, Counter):
            lines.append(f"# TYPE {name} counter")
            lines.append(f"{name} {instrument.value}")
        else:
            lines.append(f"# TYPE {name} histogram")
            lines.extend(_histogram(name, instrument))
    # Read from the store at scrape time, so they count the work of every process on it
    # (`convmem worker` beside the server); the counters above are this process's.
    jobs = memory.job_counts(all_tenants=True)
    lines += [
        "# HELP convmem_backlog_jobs index jobs pending or running",
        "# TYPE convmem_backlog_jobs gauge",
        f"convmem_backlog_jobs {jobs['pending'] + jobs['running']}",
        "# HELP convmem_failed_jobs index jobs that ran out of attempts",
        "# TYPE convmem_failed_jobs gauge",
        f"convmem_failed_jobs {jobs['failed']}",
        "# HELP convmem_index_jobs index jobs in the store by status, whichever process ran them",
        "# TYPE convmem_index_jobs gauge",
        *(f'convmem_index_jobs{{status="{status}"}} {count}' for status, count in jobs.items()),
        "# HELP convmem_index_jobs_completed_total index jobs finished by any worker process",
        "# TYPE convmem_index_jobs_completed_total counter",
        f"convmem_index_jobs_completed_total {jobs['done']}",
        "# HELP convmem_http_request_seconds request latency by method and route",
        "# TYPE convmem_http_request_seconds histogram",
    ]
    for (method, route), histogram in sorted(request_seconds.items()):
        labels = f'method="{method}",route="{route}"'
        lines.extend(_histogram("convmem_http_request_seconds", histogram, labels))
    return "\n".join(lines) + "\n"
