"""``--reranker auto``: the recommended pipeline for a collection, as the measurements of BENCHMARKS.md say.

What was measured (effectiveness table, 3 seeds, paired t-test against the first stage):

* the packaged zero-shot bi-encoder (all-MiniLM-L6-v2, nothing trained) combined with BM25 is significantly
  above the first stage in every seed on Cranfield, Vaswani, NFCorpus, WikiQA and TREC DL 2019/2020/2021, and
  no trained re-ranker measured on those collections beats it (word-level models combined are level with
  BM25; the cross-encoder and ADDAX trained on two DL years are below it on DL19/DL20);
* on Microblog the best measured pipeline stacks the two: the zero-shot bi-encoder combined with QL (QL's top
  1000, nothing trained) and, on top of that ranking, the cross-encoder trained on the other years (2 epochs x
  3,200 pairs) (``--zero-shot-base``, :mod:`pipeline.engine.stacking`): AP .4803 on 2014 against .4435 for the
  zero-shot combination alone (significant in each of 3 seeds) and .4444 for the cross-encoder + QL, QL .3924
  (BENCHMARKS.md, "Trained pipelines against the zero-shot combination"). Each of the two combined with QL
  alone is level with the other;
* on Cranfield the bi-encoder fine-tuned on the training folds (the default recipe, one epoch, bf16 where the CPU
  has it) and combined with BM25 at the weight the zero-shot model's safe rule tuned on every non-test query
  (``--zero-shot-rule anchor``, :mod:`pipeline.engine.stacking`) is above the zero-shot combination in each of
  3 seeds (AP .3428 against .3349, replayed from the recorded float32 runs, ``benchmarks/anchor_rule_replay.py``);
  on the other collections the same pipeline is level with the zero-shot combination, so they keep it (it needs
  no training), but for NFCorpus;
* on NFCorpus the same fine-tuning, one model trained on NFCorpus's own dev split (324 other queries,
  ``--train-dataset nfcorpus-dev``) instead of folds of the test queries, on a 2-epoch schedule (the dev queries
  keep the better epoch), combined the same way: nDCG@10 .3663 against .3572 for the zero-shot combination,
  significantly above it in each of 3 seeds (p .0093 / .013 / .0017;
  ``benchmarks/results/nfcorpus/bi-encoder-nfcorpus-dev-2-epochs-bf16.json``), the best pipeline measured there
  (one epoch: .3651, 2 of 3 seeds);
* on TrecQA the shipped order (correct answers first, AP .9368) is above every re-ranker measured.

So ``auto`` takes the measured best pipeline of a built-in collection (:data:`MEASURED`), and for any other
collection, with training queries or without, the zero-shot bi-encoder combined with the first stage: with
judged queries the weight is tuned by the safe rule (:func:`pipeline.engine.fusion.choose_weight`: the tuned weight
when tuning's gain is proven, half-way towards it when the gain is positive but unproven, else the first stage), without any it is the fixed :data:`UNJUDGED_WEIGHT`.
docs/recommendations.md has the table behind it.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ..core.errors import ConfigError
from .stacking_rules import ANCHOR, STACK

log = logging.getLogger(__name__)

#: the ``--reranker`` value that picks the pipeline by collection
AUTO = "auto"
#: the packaged sentence encoder the zero-shot bi-encoder scores with
ZERO_SHOT_MODEL = "all-MiniLM-L6-v2"
#: the first stage's share when a collection has no judged query to tune it on: the median of the weights the
#: safe rule tuned for the zero-shot bi-encoder on Cranfield, Vaswani, NFCorpus (3 seeds x 5 folds each) and
#: WikiQA (3 seeds, one fold): all 48 between 0.2 and 0.4
#: (benchmarks/results/<collection>/bi-encoder-zero-shot-safe.json)
UNJUDGED_WEIGHT = 0.3


@dataclass(frozen=True)
class Preset:
    """One recommended pipeline: the options ``auto`` stands for, and the measured row behind it."""

    reranker: str
    model: str | None = None
    overrides: tuple[str, ...] = ()
    k: int | None = None
    evidence: str = ""
    #: ``--zero-shot-base``: the re-ranker is stacked on this zero-shot model's combination with the first stage
    zero_shot_base: str | None = None
    #: ``--zero-shot-rule``: how the re-ranker joins that combination (with a ``zero_shot_base`` only)
    zero_shot_rule: str = STACK
    #: ``--train-dataset``: the re-ranker is trained on this other collection's queries (one model)
    train_dataset: str | None = None


ZERO_SHOT = Preset("bi-encoder", ZERO_SHOT_MODEL, evidence=(
    "zero-shot bi-encoder + first stage: significantly above BM25 in 3 of 3 seeds on Cranfield, Vaswani, "
    "NFCorpus, WikiQA, DL19/20/21, above every trained re-ranker measured there (BENCHMARKS.md)"))

#: built-in collection -> its measured best pipeline, where that is not :data:`ZERO_SHOT`
MEASURED: dict[str, Preset] = {
    "microblog": Preset("cross-encoder", None, ("max_examples_per_epoch=3200", "epochs=2", "dev_depth=100"), 1000,
                        "QL + zero-shot bi-encoder, then the cross-encoder (2 epochs x 3,200 pairs) stacked on it: "
                        "AP .4803 vs .4435 for QL + zero-shot bi-encoder (significant in 3 of 3 seeds) and QL .3924 "
                        "on 2014 (benchmarks/results/microblog/2014-three-way-bi-encoder-cross-encoder.json)",
                        zero_shot_base=ZERO_SHOT_MODEL),
    "cranfield": Preset("bi-encoder", None, ("amp=true",), None,
                        "the bi-encoder fine-tuned on the training folds (1 epoch, bf16 where the CPU has it), "
                        "combined with BM25 at the zero-shot model's weight (--zero-shot-rule anchor): AP .3428 vs "
                        ".3349 for BM25 + zero-shot bi-encoder, significant in 3 of 3 seeds (replayed, "
                        "benchmarks/anchor_rule_replay.py; run with bf16 training, seeds 1-2: .3444 / .3417), "
                        "BM25 .2812; ~1.5 h on one thread",
                        zero_shot_base=ZERO_SHOT_MODEL, zero_shot_rule=ANCHOR),
    "nfcorpus": Preset("bi-encoder", None, ("amp=true", "epochs=2"), None,
                       "the bi-encoder fine-tuned on NFCorpus's dev split (one model, 2 epochs with the better one "
                       "kept, bf16 where the CPU has it), combined with BM25 at the zero-shot model's weight "
                       "(--zero-shot-rule anchor): nDCG@10 .3663 vs .3572 for BM25 + zero-shot bi-encoder, "
                       "significantly above it in 3 of 3 seeds "
                       "(benchmarks/results/nfcorpus/bi-encoder-nfcorpus-dev-2-epochs-bf16.json), BM25 .3372; "
                       "~45 min of training on one thread", zero_shot_base=ZERO_SHOT_MODEL, zero_shot_rule=ANCHOR,
                       train_dataset="nfcorpus-dev"),
    "trecqa": Preset("none", evidence="the shipped order (AP .9368, correct answers first) is above every "
                                      "re-ranker measured (bi-encoder .7667, HCAN .6996)"),
}


def preset_for(dataset) -> Preset:
    """The pipeline ``--reranker auto`` runs on ``dataset``: :data:`MEASURED`'s entry for a built-in collection
    measured otherwise, else :data:`ZERO_SHOT`."""
    return MEASURED.get(dataset.name, ZERO_SHOT)


def resolve_auto(config, dataset):
    """``config`` with ``--reranker auto`` replaced by :func:`preset_for` ``dataset``'s pipeline (any other
    config is returned unchanged). ``--interpolate`` given by the user is kept; otherwise the zero-shot
    model's weight is tuned (``auto``, the safe rule) when the collection has judged queries, else fixed at
    :data:`UNJUDGED_WEIGHT`. ``--model``, ``--set`` and ``--config`` name one model's options: with ``auto``
    they are a :class:`ConfigError` (name the re-ranker instead)."""
    if config.reranker != AUTO:
        return config
    if config.model or config.overrides or config.config_file:
        raise ConfigError("--reranker auto picks the model and its options itself; to give --model, --set or "
                          "--config, name the re-ranker (e.g. --reranker bi-encoder --model all-MiniLM-L6-v2)")
    preset = preset_for(dataset)
    interpolate = config.interpolate
    if interpolate is None and preset.model is not None and not dataset.qrels:
        interpolate = str(UNJUDGED_WEIGHT)  # nothing to tune on: the measured weight
    stacked = config.zero_shot_base is None and interpolate in (None, "auto") and preset.zero_shot_base is not None
    resolved = dataclasses.replace(config, reranker=preset.reranker, model=preset.model,
                                   overrides=preset.overrides, k=config.k or preset.k, interpolate=interpolate,
                                   zero_shot_base=preset.zero_shot_base if stacked else config.zero_shot_base,
                                   zero_shot_rule=preset.zero_shot_rule if stacked else config.zero_shot_rule,
                                   train_dataset=preset.train_dataset)
    log.info("--reranker auto on %s: %s%s%s%s%s%s%s (%s)", dataset.name, preset.reranker,
             f" --model {preset.model}" if preset.model else "",
             "".join(f" --set {o}" for o in preset.overrides),
             f" --train-dataset {preset.train_dataset}" if preset.train_dataset else "",
             f" --zero-shot-base {resolved.zero_shot_base}" if resolved.zero_shot_base else "",
             f" --zero-shot-rule {resolved.zero_shot_rule}" if resolved.zero_shot_rule != STACK else "",
             f" --interpolate {interpolate}" if interpolate else "", preset.evidence)
    return resolved
