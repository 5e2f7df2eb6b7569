"""The recipes of the built-in datasets: the split, depth, metrics and training options their papers or
their size call for (a user's own dataset gets the general defaults of an empty :class:`Recipe`)."""
from __future__ import annotations

from .dataset import Recipe

#: HCAN's protocol (test on 2014, the last year of its Table 3; train on the other three, re-rank QL's top
#: 1000; MAP and P@30) with a CPU budget: 6,400 sampled training units per epoch, 4 epochs, the dev metric
#: over each dev query's top 100. Measured in BENCHMARKS.md (the headline command).
MICROBLOG_RECIPE = Recipe(split="2014", k=1000, metrics="AP P@30",
                          train={"max_examples_per_epoch": 6400, "epochs": 4, "dev_depth": 100},
                          pooled="the tweets of the shipped QL top-1000 runs, not the Tweets2011/2013 collections")

#: TREC DL: test on 2019 (train on 2020 and 2021), the shipped BM25 top 100, nDCG@10 first; grade 1
#: ("related") is not a training positive and AP/RR count grades >= 2, as TREC DL's binary measures do.
DL_POOL = "the passages of the shipped BM25 top-100 runs, not the 8.8M (v1) / 138M (v2) MS MARCO passages"
DL_RECIPE = Recipe(split="2019", k=100, metrics="nDCG@10 AP(rel=2) RR(rel=2)",
                   train={"positive_relevance": 2, "dev_metric": "nDCG@10"}, pooled=DL_POOL)

#: One TREC DL year alone: DL's depth, metrics and training options, without a test split (it has no splits).
DL_YEAR_RECIPE = Recipe(k=DL_RECIPE.k, metrics=DL_RECIPE.metrics, train=DL_RECIPE.train, pooled=DL_POOL)

#: TrecQA's candidate files list the correct answers first (file order alone nearly solves it: BENCHMARKS.md): that order leaks the
#: labels, so it is no first stage to combine with; re-rankers stand alone there and are read as such
TRECQA_RECIPE = Recipe(metrics="AP RR", interpolate="none")

#: NFCorpus: nDCG@10 first (BEIR's measure); training positives only among the candidates, because most of
#: a query's ~35 judged documents are not among BM25's top 100 (BENCHMARKS.md, NFCorpus)
NFCORPUS_RECIPE = Recipe(metrics="nDCG@10 AP P@10 R@{k}", train={"positive_pool": "candidates"})
