"""GPU paths: bf16 autocast training, faiss GPU search, NCCL data parallelism. They run where a GPU is visible
and skip elsewhere (CI and the project's machines have none; GPU rows go to BENCHMARKS.md when one is lent)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


@needs_gpu
def test_amp_training_on_the_gpu_learns_and_scores_like_the_cpu_copy(tmp_path):
    from pipeline.core.datasets import load_local
    from tests.helpers import TOPICS, train_tiny, write_pairs

    for split, seed, topics in (("train", 1, TOPICS[:8]), ("dev", 2, TOPICS[8:10]), ("test", 3, TOPICS[10:])):
        write_pairs(tmp_path / split, seed, topics)
    dataset = load_local(tmp_path)
    reranker, report, _ = train_tiny(dataset, epochs=2, device="cuda", amp=True)
    assert all(torch.isfinite(torch.tensor(e.loss)) for e in report.epochs)
    assert next(reranker.module.parameters()).is_cuda
    query = next(iter(dataset.queries.values()))
    docs = list(dataset.docs_iter())[:8]
    on_gpu = reranker.score(query, docs)
    path = tmp_path / "model.pt"
    reranker.save(path)
    on_cpu = type(reranker).load(path).score(query, docs)
    torch.testing.assert_close(torch.tensor(on_gpu), torch.tensor(on_cpu), atol=1e-3, rtol=0)


@needs_gpu
def test_faiss_gpu_search_returns_the_cpu_neighbours():
    import faiss
    import numpy as np

    if faiss.get_num_gpus() == 0:
        pytest.skip("faiss sees no GPU (install the [gpu] extra)")
    from indexes.codes.search import _gpu_index

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5000, 64)).astype("float32")
    cpu = faiss.IndexFlatIP(64)
    cpu.add(vectors)
    gpu = _gpu_index(cpu, binary=False)
    assert gpu is not cpu
    queries = vectors[:20]
    assert np.array_equal(cpu.search(queries, 10)[1], gpu.search(queries, 10)[1])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL data parallelism needs two GPUs")
def test_nccl_training_runs_on_two_gpus_and_rank_0_writes(tmp_path):
    from tests.helpers import DDP_TRAINING_SCRIPT as TRAIN, free_port
    from tests.helpers import TOPICS, write_pairs

    for split, seed, topics in (("train", 1, TOPICS[:8]), ("dev", 2, TOPICS[8:10]), ("test", 3, TOPICS[10:])):
        write_pairs(tmp_path / "pairs" / split, seed, topics)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                           str(free_port()), str(script), str(tmp_path / "pairs"), str(tmp_path / "two.pt")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = torch.load(tmp_path / "two.pt", weights_only=True)
    assert result["world"] == 2 and all(torch.isfinite(torch.tensor(result["losses"])))
