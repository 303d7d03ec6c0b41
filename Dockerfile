# convmem HTTP service: docker build -t convmem . && docker run -p 8077:8077 \
#   -e CONVMEM_ADMIN_KEY=... -v convmem-data:/data convmem
# Auth is on: create keys with the admin key (POST /v1/admin/keys) or
#   docker run --rm -v convmem-data:/data convmem keys create --tenant acme
# The image carries the hashing embedder only; mount a model folder and set
# CONVMEM_EMBEDDER=/models/name for a local transformer (install convmem[models] first).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[postgres]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    CONVMEM_STORE=/data/memory.db \
    CONVMEM_EMBEDDER=hashing \
    CONVMEM_LOG_LEVEL=info
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin convmem \
    && mkdir -p /data \
    && chown convmem:convmem /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "convmem[postgres]" \
    && rm -rf /wheels
USER convmem
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8077
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as r; r.urlopen('http://127.0.0.1:8077/healthz', timeout=4)"]
ENTRYPOINT ["convmem"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8077"]
