"""benchmarks/merge_rerank_seeds.py: summarising code_first_stage_rerank.py's per-seed tables."""
from pathlib import Path

import pytest

from helpers import load_benchmark
from pipeline.core.errors import DataFormatError, PipelineError

merge_rerank_seeds = load_benchmark("merge_rerank_seeds")

HEADER = ("| dataset | first stage | nDCG@10 | R@100 | nDCG@10 + addax | AP + addax | p vs BM25 + addax (nDCG@10) "
          "| re-ranking s | nDCG@10 interpolated | AP interpolated | p vs first stage alone (nDCG@10) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|\n")


def _table(path: Path, seed: int, reranked: float, interpolated: float, p: float, weight: float = 0.6,
           bm25: str = "0.3372", protocol: str = "--datasets nfcorpus --steps 100 --interpolate auto") -> Path:
    path.write_text(
        f"<!-- python benchmarks/code_first_stage_rerank.py {protocol} --seed {seed} --output {path} (2026-11-23, 617 s) -->\n"
        "# First stage + addax: BM25 vs learned codes (x86_64, 2 cores)\n"
        f"Re-ranker: loaded models/x.pt. Interpolation weight {weight} on the first stage, tuned on 49 dev queries.\n\n"
        + HEADER
        + f"| nfcorpus (323 q) | bm25 | {bm25} | 0.2572 | {reranked:.4f} | 0.1331 | - | 154 | {interpolated:.4f} | 0.1563 | {p:.3f} |\n"
        + "| nfcorpus (323 q) | codes | 0.2910 | 0.2710 | 0.2604 | 0.1070 | 0.000 | 111 | 0.2900 | 0.1321 | 0.500 |\n")
    return path


def test_seeds_are_summarised_per_first_stage(tmp_path):
    paths = [_table(tmp_path / "s3.md", 3, 0.30, 0.36, 0.001, weight=0.7),
             _table(tmp_path / "s1.md", 1, 0.31, 0.35, 0.000),
             _table(tmp_path / "s2.md", 2, 0.32, 0.34, 0.200)]
    out = tmp_path / "merged.md"
    merge_rerank_seeds.main([*map(str, paths), "--output", str(out)])
    text = out.read_text()
    assert "over seeds 1, 2, 3" in text and "weight on the first stage, per seed: 0.6, 0.6, 0.7" in text
    # seed order 1, 2, 3; bm25: two seeds above .3372 with p < .05; codes: none above the first stage
    assert ("| nfcorpus (323 q) | bm25 | 0.3372 | 0.2572 | 0.3100 ± 0.0100 | 0.3500 ± 0.0100 "
            "| 0.3500 / 0.3400 / 0.3600 | 2 of 3 |") in text
    assert "| nfcorpus (323 q) | codes | 0.2910 | 0.2710 | 0.2604 ± 0.0000 | 0.2900 ± 0.0000 |" in text
    assert text.rstrip().endswith("| 0.2900 / 0.2900 / 0.2900 | 0 of 3 |")


def test_mixed_tables_are_refused(tmp_path):
    one = _table(tmp_path / "a.md", 1, 0.3, 0.35, 0.0)
    with pytest.raises(PipelineError, match="another protocol"):
        merge_rerank_seeds.merge([one, _table(tmp_path / "b.md", 2, 0.3, 0.35, 0.0, protocol="--datasets vaswani-npl")])
    with pytest.raises(PipelineError, match="seed 1 appears twice"):
        merge_rerank_seeds.merge([one, _table(tmp_path / "c.md", 1, 0.3, 0.35, 0.0)])
    with pytest.raises(PipelineError, match="first stage bm25 on nfcorpus .323 q. has nDCG@10 0.3000"):
        merge_rerank_seeds.merge([one, _table(tmp_path / "d.md", 2, 0.3, 0.35, 0.0, bm25="0.3000")])
    broken = tmp_path / "e.md"
    broken.write_text("# a table without its command line\n")
    with pytest.raises(DataFormatError, match=r"e\.md:1: expected the '<!-- python benchmarks/code_first_stage_rerank"):
        merge_rerank_seeds.merge([broken])
