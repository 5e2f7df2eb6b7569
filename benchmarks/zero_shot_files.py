"""Which result file answers which question of issue 36: the registry ``benchmarks/beyond_zero_shot.py build``,
``benchmarks/safe_rule_replay.py``, ``benchmarks/fallback_rule_replay.py`` and ``benchmarks/matrix.py`` read.

Data only (file names relative to ``benchmarks/results``, their row labels and what each is compared with), so
that every script reading it can import it without importing the others.
"""
from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SUMMARY = RESULTS / "combination" / "beyond-zero-shot.json"

#: DL19's bi-encoder fine-tuned, then moved half-way back to its starting weights (WiSE-FT, ``--set
#: weight_ensemble=0.5``, bf16 training): its row in the result file (:func:`wise_ft_file`) -> its recipe
DL19_WISE_FT = {"bi-encoder-wise-ft-bf16": "1 epoch, bf16",
                "bi-encoder-wise-ft-3-epochs-bf16": "3 epochs, best on dev, bf16"}


def wise_ft_file(row: str) -> str:
    """The result file of a :data:`DL19_WISE_FT` row (it holds its own +safe rows)."""
    return f"dl/2019-{row}.json"


def wise_ft_label(recipe: str) -> str:
    """The label of a :data:`DL19_WISE_FT` recipe's row (the summary's and the matrix's)."""
    return f"bi-encoder fine-tuned ({recipe}), then half-way back to its starting weights (WiSE-FT 0.5)"


#: table file -> the safe re-measurement of the same runs (same protocol, seeds and recipe)
SAFE_FILES = {
    "cranfield/bi-encoder-zero-shot.json": "cranfield/bi-encoder-zero-shot-safe.json",
    "vaswani/bi-encoder-zero-shot.json": "vaswani/bi-encoder-zero-shot-safe.json",
    "nfcorpus/bi-encoder-zero-shot.json": "nfcorpus/bi-encoder-zero-shot-safe.json",
    "wikiqa/bi-encoder-zero-shot.json": "wikiqa/bi-encoder-zero-shot-safe.json",
    "cranfield/knrm.json": "cranfield/knrm-safe.json",
    "vaswani/knrm.json": "vaswani/knrm-safe.json",
    "dl/2019-bi-encoder-zero-shot.json": "dl/2019-bi-encoder-zero-shot-safe.json",
    "dl/2020-bi-encoder-zero-shot.json": "dl/2020-bi-encoder-zero-shot-safe.json",
    "dl/2021-bi-encoder-zero-shot.json": "dl/2021-bi-encoder-zero-shot-safe.json",
    "microblog/2014-hcan-headline.json": "microblog/2014-hcan-headline-safe.json",
    # measured under both rules at once (QL top 1000, as the cross-encoder rows)
    "microblog/2013-bi-encoder-zero-shot-safe.json": "microblog/2013-bi-encoder-zero-shot-safe.json",
    "microblog/2014-bi-encoder-zero-shot-safe.json": "microblog/2014-bi-encoder-zero-shot-safe.json",
    "microblog/2013-transformers-depth1000-3seeds.json": "microblog/2013-cross-encoder-safe.json",
    "microblog/2014-transformers-depth1000-3seeds.json": "microblog/2014-cross-encoder-safe.json",
    "dl/2021-knrm-drmm.json": "dl/2021-knrm-drmm-safe.json",
    "dl/2019-knrm-drmm.json": "dl/2019-knrm-drmm-safe.json",
    # the fine-tuning run holds its own +safe rows (benchmarks/results/dl/2019-bi-encoder-in-batch.md)
    "dl/2019-bi-encoder-in-batch.json": "dl/2019-bi-encoder-in-batch.json",
    "dl/2020-bi-encoder-in-batch.json": "dl/2020-bi-encoder-in-batch.json",
    "dl/2021-bi-encoder-in-batch.json": "dl/2021-bi-encoder-in-batch.json",
    "vaswani/bi-encoder-in-batch-bf16.json": "vaswani/bi-encoder-in-batch-bf16.json",
    "cranfield/bi-encoder-in-batch.json": "cranfield/bi-encoder-in-batch.json",
    "nfcorpus/bi-encoder-in-batch-bf16.json": "nfcorpus/bi-encoder-in-batch-bf16.json",
    **{wise_ft_file(row): wise_ft_file(row) for row in DL19_WISE_FT},
    "dl/2019-cross-encoder-distilled-safe.json": "dl/2019-cross-encoder-distilled-safe.json",
    "dl/2020-knrm-drmm.json": "dl/2020-knrm-drmm-safe.json",
    "nfcorpus/knrm.json": "nfcorpus/knrm-safe.json",
    "wikiqa/match-srnn.json": "wikiqa/match-srnn-safe.json",
}


#: a trained model's row of a DL year -> (its label, its result file for the year); the years differ only in the file
DL_MODELS = {
    "drmm": ("DRMM", "dl/{year}-knrm-drmm.json"),
    "knrm": ("KNRM", "dl/{year}-knrm-drmm.json"),
    "cross-encoder": ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)", "dl/{year}-cross-encoder.json"),
    "addax": ("ADDAX (MiniLM, 2 epochs x 3,200 pairs)", "dl/{year}-addax.json"),
    "hcan": ("HCAN (2 epochs x 3,200 pairs)", "dl/{year}-hcan.json"),
    "bi-encoder-in-batch": ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch)",
                            "dl/{year}-bi-encoder-in-batch.json"),
}
#: the models trained on the other two years and measured on DL19 and DL20
DL_TRAINED = ("drmm", "knrm", "cross-encoder", "addax", "hcan", "bi-encoder-in-batch")


def _dl_rows(year: int, rows) -> list[tuple[str, str, str]]:
    """:data:`COLLECTIONS`' trained rows ``(label, file, row)`` of a DL ``year``, in the order of ``rows``."""
    return [(DL_MODELS[row][0], DL_MODELS[row][1].format(year=year), row) for row in rows]


def _dl_three_way(year: int, models) -> list[str]:
    """:data:`THREE_WAY`'s files of a DL ``year`` (``three_way_combination.py --output``'s names), in order."""
    return [f"dl/{year}-three-way-bi-encoder-{model}.json" for model in models]


def _microblog_cross_encoder(year: int) -> tuple[str, str, str]:
    """:data:`COLLECTIONS`' cross-encoder row ``(label, file, row)`` of a Microblog ``year`` (QL top 1000)."""
    return ("cross-encoder (MiniLM, 2 epochs x 3,200 pairs)",
            f"microblog/{year}-transformers-depth1000-3seeds.json", "cross-encoder")


#: per shipped collection: the first-stage / zero-shot file and the trained rows to compare with it
COLLECTIONS = [
    ("Cranfield", "AP", "cranfield/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "cranfield/knrm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch, 5-fold CV)", "cranfield/bi-encoder-in-batch.json",
       "bi-encoder-in-batch")]),
    ("Vaswani", "AP", "vaswani/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "vaswani/knrm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 1 epoch, 5-fold CV; amp requested: seed 1 trained in "
       "float32 on an AVX2 host, seeds 2-3 in bf16 on an AVX512-BF16 host)", "vaswani/bi-encoder-in-batch-bf16.json",
       "bi-encoder-in-batch-bf16")]),
    ("NFCorpus", "nDCG@10", "nfcorpus/bi-encoder-zero-shot.json",
     [("KNRM (recipe defaults, 5-fold CV)", "nfcorpus/knrm.json", "knrm"),
      ("bi-encoder fine-tuned (in-batch + 3 BM25 negatives, 800 units = 50 batches of an epoch's ~1,377, bf16, "
       "5-fold CV)", "nfcorpus/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16")]),
    ("Microblog 2013", "AP", "microblog/2013-bi-encoder-zero-shot-safe.json",
     [("HCAN (hinge, up to 20 epochs)", "microblog/2013-hcan-hinge-all.json", "hcan-HCAN"),
      _microblog_cross_encoder(2013)]),
    ("Microblog 2014", "AP", "microblog/2014-bi-encoder-zero-shot-safe.json",
     [("HCAN (the headline's recipe)", "microblog/2014-hcan-headline.json", "hcan"), _microblog_cross_encoder(2014)]),
    ("WikiQA (237 q)", "AP", "wikiqa/bi-encoder-zero-shot.json",
     [("Bi-Match-SRNN", "wikiqa/match-srnn.json", "bi-match-srnn")]),
    ("TrecQA raw-test", "AP", "trecqa/bi-encoder-zero-shot.json", [("HCAN", "trecqa/hcan.json", "hcan-HCAN")]),
    ("DL19", "nDCG@10", "dl/2019-bi-encoder-zero-shot.json",
     _dl_rows(2019, DL_TRAINED) + [
         ("cross-encoder distilled from the zero-shot bi-encoder (distill_weight 0.5, 2 epochs x 640 groups of 5)",
          "dl/2019-cross-encoder-distilled-safe.json", "cross-encoder-distilled")] + [
         (wise_ft_label(recipe), wise_ft_file(row), row) for row, recipe in DL19_WISE_FT.items()]),
    ("DL20", "nDCG@10", "dl/2020-bi-encoder-zero-shot.json", _dl_rows(2020, DL_TRAINED)),
    ("DL21", "nDCG@10", "dl/2021-bi-encoder-zero-shot.json", _dl_rows(2021, ("drmm", "knrm", "bi-encoder-in-batch"))),
]

#: per collection: the three-way combinations measured (first stage + zero-shot bi-encoder + a trained seed model,
#: benchmarks/three_way_combination.py), each against its own two-way step (first stage + zero-shot bi-encoder)
THREE_WAY = {
    "Cranfield": ["cranfield/three-way-bi-encoder-knrm.json", "cranfield/three-way-bi-encoder-drmm.json",
                  "cranfield/three-way-bi-encoder-hcan.json", "cranfield/three-way-bi-encoder-cross-encoder-bf16.json",
                  "cranfield/three-way-bi-encoder-bi-encoder-in-batch.json",
                  # --rule anchor run for real with bf16 training (seeds 1-2), beside the float32 replay
                  "cranfield/anchor-bi-encoder-bi-encoder-in-batch-bf16.json"],
    "Vaswani": ["vaswani/three-way-bi-encoder-knrm.json", "vaswani/three-way-bi-encoder-drmm.json",
                "vaswani/three-way-bi-encoder-hcan.json",
                "vaswani/three-way-bi-encoder-bi-encoder-in-batch-bf16.json"],
    "NFCorpus": ["nfcorpus/three-way-bi-encoder-knrm.json", "nfcorpus/three-way-bi-encoder-drmm.json",
                 "nfcorpus/three-way-bi-encoder-hcan.json", "nfcorpus/three-way-bi-encoder-cross-encoder-bf16.json",
                 "nfcorpus/three-way-bi-encoder-bi-encoder-in-batch-bf16.json"],
    "Microblog 2013": ["microblog/2013-three-way-bi-encoder-cross-encoder.json", "microblog/2013-three-way-bi-encoder-hcan.json"],
    "Microblog 2014": ["microblog/2014-three-way-bi-encoder-cross-encoder.json", "microblog/2014-three-way-bi-encoder-hcan.json"],
    "DL19": _dl_three_way(2019, ("drmm", "knrm", "hcan", "cross-encoder-distilled", "bi-encoder-in-batch")),
    "DL20": _dl_three_way(2020, ("drmm", "knrm", "hcan", "cross-encoder-distilled", "bi-encoder-in-batch")),
    "DL21": _dl_three_way(2021, ("drmm", "knrm", "hcan")),
}


#: per collection: trained models replayed under ``--zero-shot-rule fallback`` (a ``measure`` file with the model's
#: per-fold dev evidence and per-query values, its row label, the zero-shot safe re-measurement of the same folds,
#: and the file of a real ``three_way_combination.py --rule fallback`` run of some of its seeds, or ``None``,
#: against which the replay is checked). The rule is meant for the bi-encoder fine-tuned from the zero-shot model;
#: KNRM and Microblog's HCAN show what it does to models that are not (docs/recommendations.md)
FALLBACK_REPLAYS = {
    "Cranfield": [("cranfield/bi-encoder-in-batch.json", "bi-encoder-in-batch", "cranfield/bi-encoder-zero-shot-safe.json",
                   "cranfield/fallback-bi-encoder-bi-encoder-in-batch.json"),
                  ("cranfield/knrm-safe.json", "knrm", "cranfield/bi-encoder-zero-shot-safe.json", None)],
    "Vaswani": [("vaswani/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16",
                 "vaswani/bi-encoder-zero-shot-safe.json", "vaswani/fallback-bi-encoder-bi-encoder-in-batch-bf16.json"),
                ("vaswani/knrm-safe.json", "knrm", "vaswani/bi-encoder-zero-shot-safe.json", None)],
    "NFCorpus": [("nfcorpus/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16",
                  "nfcorpus/bi-encoder-zero-shot-safe.json", None),
                 ("nfcorpus/knrm-safe.json", "knrm", "nfcorpus/bi-encoder-zero-shot-safe.json", None)],
    "Microblog 2014": [("microblog/2014-hcan-headline-safe.json", "hcan", "microblog/2014-bi-encoder-zero-shot-safe.json",
                        None)],
    "DL19": [("dl/2019-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2019-bi-encoder-zero-shot-safe.json",
              None)],
    "DL20": [("dl/2020-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2020-bi-encoder-zero-shot-safe.json",
              "dl/2020-fallback-bi-encoder-bi-encoder-in-batch.json")],
    "DL21": [("dl/2021-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2021-bi-encoder-zero-shot-safe.json",
              None)],
}


#: collection -> ``(fine-tuned bi-encoder's measure file, its row label, zero-shot safe file, real
#: three_way_combination.py --rule anchor run or None)``: what ``anchor_rule_replay.py`` replays. Only a bi-encoder
#: fine-tuned from the zero-shot model (the rule's premise: the same score scale), and only files that record
#: every grid weight's test values: dl/2019-bi-encoder-in-batch.json does not (its DL19 row is the WiSE-FT ones')
ANCHOR_REPLAYS = {
    "Cranfield": [("cranfield/bi-encoder-in-batch.json", "bi-encoder-in-batch", "cranfield/bi-encoder-zero-shot-safe.json",
                   None),
                  ("cranfield/bi-encoder-query-side-bf16.json", "bi-encoder-query-side-bf16",
                   "cranfield/bi-encoder-zero-shot-safe.json", None)],
    "Vaswani": [("vaswani/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16",
                 "vaswani/bi-encoder-zero-shot-safe.json", "vaswani/anchor-bi-encoder-bi-encoder-in-batch-bf16.json"),
                ("vaswani/bi-encoder-query-side-bf16.json", "bi-encoder-query-side-bf16",
                 "vaswani/bi-encoder-zero-shot-safe.json", None),
                # one model trained on all of Cranfield's queries (--train-dataset cranfield), given to each fold
                ("vaswani/bi-encoder-cranfield-bf16.json", "bi-encoder-cranfield-bf16",
                 "vaswani/bi-encoder-zero-shot-safe.json", None)],
    "NFCorpus": [("nfcorpus/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16",
                  "nfcorpus/bi-encoder-zero-shot-safe.json", None),
                 ("nfcorpus/bi-encoder-query-side-bf16.json", "bi-encoder-query-side-bf16",
                  "nfcorpus/bi-encoder-zero-shot-safe.json", None),
                 # one model per seed trained on NFCorpus's dev split (pipeline.train --folds 1), given to each fold
                 ("nfcorpus/bi-encoder-nfcorpus-dev-bf16.json", "bi-encoder-nfcorpus-dev-bf16",
                  "nfcorpus/bi-encoder-zero-shot-safe.json", None),
                 # the same with a 2-epoch schedule (--set epochs=2; the dev queries keep the better epoch)
                 ("nfcorpus/bi-encoder-nfcorpus-dev-2-epochs-bf16.json", "bi-encoder-nfcorpus-dev-2-epochs-bf16",
                  "nfcorpus/bi-encoder-zero-shot-safe.json", None)],
    "DL19": [(wise_ft_file(row), row, "dl/2019-bi-encoder-zero-shot-safe.json", None) for row in DL19_WISE_FT],
    "DL20": [("dl/2020-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2020-bi-encoder-zero-shot-safe.json",
              None)],
    "DL21": [("dl/2021-bi-encoder-in-batch.json", "bi-encoder-in-batch", "dl/2021-bi-encoder-zero-shot-safe.json",
              None)],
}


def anchor_entry(file: str) -> tuple[str, str, str, str | None]:
    """The :data:`ANCHOR_REPLAYS` entry of a fine-tuned bi-encoder's ``measure`` file."""
    return next(entry for entries in ANCHOR_REPLAYS.values() for entry in entries if entry[0] == file)


def fallback_entry(file: str) -> tuple[str, str, str, str | None]:
    """The :data:`FALLBACK_REPLAYS` entry of a trained model's ``measure`` file."""
    return next(entry for entries in FALLBACK_REPLAYS.values() for entry in entries if entry[0] == file)


def load(file: str) -> dict | None:
    """A result file (relative to ``benchmarks/results``) as JSON, ``None`` when it is not there."""
    path = RESULTS / file
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
