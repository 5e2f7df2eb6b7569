"""The model x collection matrix that opens BENCHMARKS.md, rendered from the result files of ``benchmarks/results``.

One row per model (alone, and combined with the first stage where that was measured), one column per shipped
collection, each cell the collection's main metric as mean ± sample sd over the seeds a command ran, with the
number of seeds and a link to the numbered source under the table: the result file and the command recorded
in it. Nothing is computed from anything but those files; a pair no file holds is "—". Most sources are the
JSON files ``reproduce.py`` and ``beyond_zero_shot.py measure`` write; a few Microblog and WikiQA word-level
rows exist only as the Markdown tables of runs stopped before their JSON was written, and are read from the
per-seed column of those tables (the command is the table's first-line comment).

Example::

    python benchmarks/matrix.py                          # print the block
    python benchmarks/matrix.py --update BENCHMARKS.md   # rewrite it between <!-- matrix:begin/end -->
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from effectiveness import tables_main  # noqa: E402
from zero_shot_files import ANCHOR_REPLAYS, DL19_WISE_FT, anchor_entry, wise_ft_file, wise_ft_label  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NAME = "matrix"


@dataclass(frozen=True)
class Column:
    """One collection: its label, main metric and first stage (the first stage's value is read from a source)."""

    key: str
    label: str
    metric: str
    first_stage: str


@dataclass(frozen=True)
class Source:
    """One measured cell: ``row`` of ``file`` (a ``reproduce.py`` JSON, or a Markdown table's per-seed column)."""

    file: str
    row: str

    def values(self, metric: str) -> list[float]:
        """The per-seed values of ``metric`` in this row.

        Args:
            metric: a measure the file recorded, e.g. ``"AP"``.

        Returns:
            One value per seed, in the file's order.

        Example:
            >>> Source("cranfield/knrm.json", "knrm").values("AP")[:1]  # doctest: +SKIP
            [0.1...]
        """
        if self.file.endswith(".json"):
            data = load_json(self.file)
            if self.row == STACKED_ROW:  # a three_way_combination.py file: the stacked run of each seed
                return [float(v) for v in data["three_way"]]
            if self.row == FALLBACK_ROW:  # --zero-shot-rule fallback, replayed by fallback_rule_replay.py
                from fallback_rule_replay import fallback_replay
                from zero_shot_files import fallback_entry

                _, label, zero_file, _ = fallback_entry(self.file)
                if metric != data["metric"]:
                    raise SystemExit(f"{self.file}: the fallback replay has {data['metric']} only, not {metric}")
                replay = fallback_replay(data, load_json(zero_file), label)
                return [sum(replay[seed]["fallback"].values()) / len(replay[seed]["fallback"])
                        for seed in sorted(replay, key=int)]
            if self.row == ANCHOR_ROW:  # --zero-shot-rule anchor, replayed by anchor_rule_replay.py
                from anchor_rule_replay import anchor_replay

                if metric != data["metric"]:
                    raise SystemExit(f"{self.file}: the anchor replay has {data['metric']} only, not {metric}")
                replay = anchor_replay(data, load_json(anchor_entry(self.file)[2]))
                return [sum(replay[seed]["anchor"].values()) / len(replay[seed]["anchor"])
                        for seed in sorted(replay, key=int)]
            if self.row.endswith("+safe"):
                # the rule --interpolate auto applies now, replayed where the file records every weight's
                # test values (safe_rule_replay.safe_result checks the replay against the recorded rows)
                from safe_rule_replay import safe_result

                replayed = safe_result(data, self.row) or {}
                if metric in replayed:
                    return [float(v) for v in replayed[metric]]
            return [float(v) for v in data["results"][self.row][metric]]
        return markdown_values(self.file, self.row, metric)

    def command(self) -> str:
        """The command recorded in the file (a Markdown table's first-line comment)."""
        if self.file.endswith(".json"):
            return "python " + load_json(self.file)["command"]
        first = (RESULTS / self.file).read_text(encoding="utf-8").split("-->", 1)[0]
        return " ".join(first.replace("<!--", "").split())

    def precision(self) -> str:
        """``"bf16"`` when the recorded command ran with ``--bf16``, else ``""`` (float32)."""
        return "bf16" if re.search(r"--bf16\b", self.command()) else ""


def load_json(file: str) -> dict:
    """A JSON result file of ``benchmarks/results``."""
    return json.loads((RESULTS / file).read_text(encoding="utf-8"))


def markdown_values(file: str, row: str, metric: str) -> list[float]:
    """Per-seed values of ``metric`` from a Markdown result table whose last column lists them per seed.

    The per-seed column reads ``0.2059/0.4139; 0.2123/0.4172`` (optionally ``seed 1: ...``), one ``/``-separated
    group per seed in the order of the table's metric columns; the row is the one whose model cell is ``row``
    (with or without a trailing ``(N seeds)``).

    Args:
        file: path under ``benchmarks/results``.
        row: the model name in the first cell.
        metric: one of the table's metric columns.

    Returns:
        One value per seed.

    Example:
        >>> markdown_values("microblog/2014-models.md", "drmm", "AP")  # doctest: +SKIP
        [0.3411, 0.3396, 0.3226]
    """
    lines = [line for line in (RESULTS / file).read_text(encoding="utf-8").splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    metrics = [name for name in header[1:] if name not in ("seeds",) and not name.startswith("per seed")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if re.sub(r" \(\d+ seeds?\)$", "", cells[0]) == row:
            groups = [re.sub(r"^seed \d+:\s*", "", g.strip()) for g in cells[-1].split(";") if g.strip()]
            return [float(group.split("/")[metrics.index(metric)]) for group in groups]
    raise SystemExit(f"benchmarks/results/{file}: no row {row!r} in its table")


#: the collections, in the order of the matrix's columns
COLUMNS = [
    *(Column(f"mb{year}", f"Microblog {year}", "AP", "QL top-1000") for year in (2011, 2012, 2013, 2014)),
    *(Column(f"dl{year}", f"DL{year}", "nDCG@10", "BM25 top-100") for year in (19, 20, 21)),
    *(Column(key, label, metric, "BM25 top-100")
      for key, label, metric in (("nfcorpus", "NFCorpus", "nDCG@10"), ("nfc-titles", "NFCorpus titles", "P@1"))),
    Column("wikiqa", "WikiQA", "AP", "page order, 237 q"),
    Column("trecqa", "TrecQA raw-test", "AP", "file order, correct first"),
    *(Column(key, key.capitalize(), "AP", "BM25 top-100") for key in ("vaswani", "cranfield")),
]

ALONE, TUNED, SAFE = "", " + first stage, tuned weight", " + first stage, safe rule"
#: a model stacked on the zero-shot combination (``--zero-shot-base``, ``three_way_combination.py``)
STACKED = " stacked on first stage + zero-shot bi-encoder, safe rule"
#: the row label of the bi-encoder fine-tuned by its default recipe (docs/bi-encoder-fine-tuning.md); NFCorpus's
#: epoch was capped at 800 units so that 3 seeds fit a session
FINE_TUNED_BI_ENCODER = "bi-encoder, fine-tuned (in-batch, 1 epoch; NFCorpus 800 units)"
#: the row of a three-way result file that holds the stacked run's per-seed values
STACKED_ROW = "three-way"
#: a fine-tuned model under ``--zero-shot-rule fallback``: its own combination with the first stage where proven on
#: the dev queries, else the zero-shot combination (``pipeline.engine.stacking``)
FALLBACK = " + first stage where proven, else first stage + zero-shot bi-encoder (--zero-shot-rule fallback)"
#: the row name of that replay (``fallback_rule_replay.fallback_replay``) in a fine-tuned ``measure`` file
FALLBACK_ROW = "fallback (replayed)"
#: a fine-tuned bi-encoder under ``--zero-shot-rule anchor``: its combination with the first stage at the zero-shot
#: model's weight (``pipeline.engine.stacking``)
ANCHOR = " + first stage at the zero-shot bi-encoder's weight (--zero-shot-rule anchor)"
#: the row name of that replay (``anchor_rule_replay.anchor_replay``) in a fine-tuned ``measure`` file
ANCHOR_ROW = "anchor (replayed)"


def _anchored(sources: dict[str, Source]) -> dict[str, Source]:
    """The :data:`ANCHOR_ROW` cells of ``sources``' files that :data:`zero_shot_files.ANCHOR_REPLAYS` replays."""
    replayed = {entry[0] for entries in ANCHOR_REPLAYS.values() for entry in entries}
    return {key: Source(source.file, ANCHOR_ROW) for key, source in sources.items() if source.file in replayed}


def _models(pattern: str, row: str, keys: list[str]) -> dict[str, Source]:
    """``{column: Source}`` for a file family such as ``"dl/{year}-knrm-drmm.json"``."""
    years = {"mb2011": "2011", "mb2012": "2012", "mb2013": "2013", "mb2014": "2014",
             "dl19": "2019", "dl20": "2020", "dl21": "2021"}
    return {key: Source(pattern.format(year=years[key]), row) for key in keys}


def _three_way(model: str, keys: list[str]) -> dict[str, Source]:
    """``{column: Source}`` of ``model``'s three-way files (``three_way_combination.py``): a year of Microblog or
    DL is ``<folder>/<year>-three-way-bi-encoder-<model>.json``, any other collection ``<key>/three-way-...``."""
    sources = {}
    for prefix, folder in (("mb", "microblog"), ("dl", "dl")):
        sources.update(_models(f"{folder}/{{year}}-three-way-bi-encoder-{model}.json", STACKED_ROW,
                               [key for key in keys if key.startswith(prefix)]))
    sources.update({key: Source(f"{key}/three-way-bi-encoder-{model}.json", STACKED_ROW)
                    for key in keys if not key.startswith(("mb", "dl"))})
    return sources


#: the fine-tuned bi-encoder's ``beyond_zero_shot.py measure`` file and row label per column. Vaswani's and
#: NFCorpus's runs are labelled for the amp they asked for: Vaswani's seed 1 AVX2 host trained in float32, the other
#: runs' AVX512-BF16 host in bf16 (scoring is float32 in all)
FINE_TUNED_RUNS = {"dl19": ("dl/2019-bi-encoder-in-batch.json", "bi-encoder-in-batch"),
                   "dl20": ("dl/2020-bi-encoder-in-batch.json", "bi-encoder-in-batch"),
                   "dl21": ("dl/2021-bi-encoder-in-batch.json", "bi-encoder-in-batch"),
                   "nfcorpus": ("nfcorpus/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16"),
                   "vaswani": ("vaswani/bi-encoder-in-batch-bf16.json", "bi-encoder-in-batch-bf16"),
                   "cranfield": ("cranfield/bi-encoder-in-batch.json", "bi-encoder-in-batch")}


#: the bi-encoder fine-tuned on the query side only (``--set train_side=query``), ``measure`` file per column
QUERY_SIDE_RUNS = {key: f"{key}/bi-encoder-query-side-bf16.json" for key in ("nfcorpus", "vaswani", "cranfield")}
QUERY_SIDE_BI_ENCODER = "bi-encoder, fine-tuned on the query side (in-batch, 1 epoch, bf16)"
#: one bi-encoder per seed trained on NFCorpus's dev split (``--train-dataset nfcorpus-dev``) and given to every
#: fold: (row label, ``measure`` file, row of that file) for 1 epoch and for the 2-epoch schedule auto runs
DEV_SPLIT_RUNS = [
    ("bi-encoder, trained on NFCorpus's dev split (--train-dataset nfcorpus-dev, 1 epoch, bf16)",
     "nfcorpus/bi-encoder-nfcorpus-dev-bf16.json", "bi-encoder-nfcorpus-dev-bf16"),
    ("bi-encoder, trained on NFCorpus's dev split (--train-dataset nfcorpus-dev, 2 epochs, best on dev, amp requested: float32 on an AVX2 host)",
     "nfcorpus/bi-encoder-nfcorpus-dev-2-epochs-bf16.json", "bi-encoder-nfcorpus-dev-2-epochs-bf16")]


def _fine_tuned_bi_encoder(rule: str) -> dict[str, Source]:
    """The fine-tuned bi-encoder's cells (:data:`FINE_TUNED_RUNS`) for ``rule``: ``""`` alone, ``"+interp"`` or
    ``"+safe"``."""
    return {key: Source(file, label + rule) for key, (file, label) in FINE_TUNED_RUNS.items()}


def _fine_tuned_stacked(keys: list[str]) -> dict[str, Source]:
    """The fine-tuned bi-encoder stacked on the zero-shot combination: each column's three-way file, named after
    that column's row label (:data:`FINE_TUNED_RUNS`)."""
    return {key: _three_way(FINE_TUNED_RUNS[key][1], [key])[key] for key in keys}


def _word_level(name: str, mb2013: str, mb2014: str, wikiqa: str) -> dict[str, Source]:
    """A word-level model's cells on the collections where all of them ran (file names per collection)."""
    return {"mb2013": Source(mb2013, name), "mb2014": Source(mb2014, name),
            "nfc-titles": Source("nfcorpus/titles-models-3seeds.json", name),
            "wikiqa": Source(wikiqa, name), "trecqa": Source("trecqa/models.json", name)}


#: (model, how it is combined with the first stage, {column: source}); each row's recipe is its source's command
ROWS: list[tuple[str, str, dict[str, Source]]] = [
    ("KNRM", ALONE, {**_word_level("knrm", "microblog/2013-models.md", "microblog/2014-models.md", "wikiqa/models.md"),
                     **_models("dl/{year}-knrm-drmm.json", "knrm", ["dl19", "dl20", "dl21"]),
                     **{c: Source(f"{c}/knrm.json", "knrm") for c in ("nfcorpus", "vaswani", "cranfield")}}),
    ("KNRM", TUNED, {**_models("dl/{year}-knrm-drmm.json", "knrm+interp", ["dl19", "dl20", "dl21"]),
                     **{c: Source(f"{c}/knrm.json", "knrm+interp") for c in ("nfcorpus", "vaswani", "cranfield")}}),
    ("KNRM", SAFE, {"cranfield": Source("cranfield/knrm-safe.json", "knrm+safe"),
                    "vaswani": Source("vaswani/knrm-safe.json", "knrm+safe"),
                    "nfcorpus": Source("nfcorpus/knrm-safe.json", "knrm+safe")}),
    ("KNRM", STACKED, _three_way("knrm", ["dl19", "dl20", "dl21", "nfcorpus", "vaswani", "cranfield"])),
    ("DRMM", ALONE, {**_word_level("drmm", "microblog/2013-models.md", "microblog/2014-models.md", "wikiqa/models.md"),
                     **_models("dl/{year}-knrm-drmm.json", "drmm", ["dl19", "dl20", "dl21"])}),
    ("DRMM", TUNED, _models("dl/{year}-knrm-drmm.json", "drmm+interp", ["dl19", "dl20", "dl21"])),
    ("DRMM", SAFE, _models("dl/{year}-knrm-drmm-safe.json", "drmm+safe", ["dl19", "dl20", "dl21"])),
    ("DRMM", STACKED, _three_way("drmm", ["dl19", "dl20", "dl21", "nfcorpus", "vaswani", "cranfield"])),
    ("Conv-KNRM", ALONE, _word_level("conv-knrm", "microblog/2013-models.md", "microblog/2014-models.md",
                                     "wikiqa/models.md")),
    ("MatchPyramid", ALONE, _word_level("matchpyramid", "microblog/2013-models.md", "microblog/2014-models.md",
                                        "wikiqa/models.md")),
    ("MV-LSTM", ALONE, _word_level("mvlstm", "microblog/2013-models-rest.json", "microblog/2014-models-all.md",
                                   "wikiqa/models.md")),
    ("aMV-LSTM", ALONE, _word_level("amvlstm", "microblog/2013-models-rest.json", "microblog/2014-models-rest3.md",
                                    "wikiqa/models.md")),
    ("IASM", ALONE, _word_level("iasm", "microblog/2013-models-rest.json", "microblog/2014-models-rest3.md",
                                "wikiqa/models.md")),
    ("IASM-static (eq. 3's static matching matrix)", ALONE,
     _word_level("iasm-static", "microblog/2013-models-rest.json", "microblog/2014-models-rest3.md",
                 "wikiqa/models.md")),
    ("Match-SRNN", ALONE, _word_level("match-srnn", "microblog/2013-models-rest.json",
                                      "microblog/2014-models-rest3.md", "wikiqa/match-srnn.json")),
    ("Bi-Match-SRNN", ALONE, _word_level("bi-match-srnn", "microblog/2013-models-rest.json",
                                         "microblog/2014-models-all.md", "wikiqa/match-srnn.json")),
    # WikiQA's table run had no combined row: both rules from the re-measurement (the same scores)
    ("Bi-Match-SRNN", TUNED, {"wikiqa": Source("wikiqa/match-srnn-safe.json", "bi-match-srnn+interp")}),
    ("Bi-Match-SRNN", SAFE, {"wikiqa": Source("wikiqa/match-srnn-safe.json", "bi-match-srnn+safe")}),
    ("HCAN", ALONE, {"mb2013": Source("microblog/2013-hcan-full.json", "hcan-HCAN"),
                     "mb2014": Source("microblog/2014-hcan-headline.json", "hcan"),
                     **_models("dl/{year}-hcan.json", "hcan", ["dl19", "dl20"]),
                     "trecqa": Source("trecqa/hcan.json", "hcan-HCAN")}),
    ("HCAN", TUNED, {"mb2014": Source("microblog/2014-hcan-headline.json", "hcan+interp"),
                     **_models("dl/{year}-hcan.json", "hcan+interp", ["dl19", "dl20"])}),
    ("HCAN", SAFE, {"mb2014": Source("microblog/2014-hcan-headline-safe.json", "hcan+safe")}),
    ("HCAN", STACKED, _three_way("hcan", ["mb2013", "mb2014", "dl19", "dl20", "dl21", "nfcorpus", "vaswani", "cranfield"])),
    ("HCAN, bf16", ALONE, {"mb2014": Source("microblog/2014-hcan-headline-bf16.json", "hcan")}),
    ("HCAN, bf16", TUNED, {"mb2014": Source("microblog/2014-hcan-headline-bf16.json", "hcan+interp")}),
    ("HCAN, hinge loss, up to 20 epochs", ALONE,
     _models("microblog/{year}-hcan-hinge-all.json", "hcan-HCAN", ["mb2011", "mb2012", "mb2013", "mb2014"])),
    ("HCAN, hinge loss, up to 20 epochs", TUNED,
     _models("microblog/{year}-hcan-hinge-all.json", "hcan-HCAN+interp", ["mb2011", "mb2012", "mb2013", "mb2014"])),
    ("cross-encoder (MiniLM, 2 x 3,200 pairs)", ALONE,
     {**_models("microblog/{year}-transformers-depth1000-3seeds.json", "cross-encoder", ["mb2013", "mb2014"]),
      **_models("dl/{year}-cross-encoder.json", "cross-encoder", ["dl19", "dl20"]),
      "wikiqa": Source("wikiqa/transformers-3seeds.json", "cross-encoder")}),
    ("cross-encoder (MiniLM, 2 x 3,200 pairs)", TUNED,
     {**_models("microblog/{year}-transformers-depth1000-3seeds.json", "cross-encoder+interp", ["mb2013", "mb2014"]),
      **_models("dl/{year}-cross-encoder.json", "cross-encoder+interp", ["dl19", "dl20"])}),
    ("cross-encoder (MiniLM, 2 x 3,200 pairs)", SAFE,
     _models("microblog/{year}-cross-encoder-safe.json", "cross-encoder+safe", ["mb2013", "mb2014"])),
    ("cross-encoder distilled from the zero-shot bi-encoder (weight 0.5, 2 x 640 groups of 5)", ALONE,
     {"dl19": Source("dl/2019-cross-encoder-distilled-safe.json", "cross-encoder-distilled")}),
    ("cross-encoder distilled from the zero-shot bi-encoder (weight 0.5, 2 x 640 groups of 5)", TUNED,
     {"dl19": Source("dl/2019-cross-encoder-distilled-safe.json", "cross-encoder-distilled+interp")}),
    ("cross-encoder distilled from the zero-shot bi-encoder (weight 0.5, 2 x 640 groups of 5)", SAFE,
     {"dl19": Source("dl/2019-cross-encoder-distilled-safe.json", "cross-encoder-distilled+safe")}),
    ("cross-encoder (MiniLM, 6 epochs)", ALONE, {"wikiqa": Source("wikiqa/long-ce-3seeds.json", "cross-encoder")}),
    ("ADDAX (MiniLM, 2 x 3,200 pairs)", ALONE,
     {**_models("microblog/{year}-transformers-depth1000-3seeds.json", "addax", ["mb2013", "mb2014"]),
      **_models("dl/{year}-addax.json", "addax", ["dl19", "dl20"]),
      "wikiqa": Source("wikiqa/transformers-3seeds.json", "addax")}),
    ("ADDAX (MiniLM, 2 x 3,200 pairs)", TUNED,
     {**_models("microblog/{year}-transformers-depth1000-3seeds.json", "addax+interp", ["mb2013", "mb2014"]),
      **_models("dl/{year}-addax.json", "addax+interp", ["dl19", "dl20"])}),
    ("ADDAX (MiniLM, 2 x 3,200 pairs), bf16", ALONE, _models("dl/{year}-addax-bf16.json", "addax", ["dl19", "dl20"])),
    ("ADDAX (MiniLM, 2 x 3,200 pairs), bf16", TUNED,
     _models("dl/{year}-addax-bf16.json", "addax+interp", ["dl19", "dl20"])),
    ("ADDAX (MiniLM, the paper's recipe: the defaults)", ALONE,
     {"wikiqa": Source("wikiqa/paper18-addax-3seeds.json", "addax")}),
    ("bi-encoder, zero-shot (MiniLM as packaged)", ALONE,
     {**_models("dl/{year}-bi-encoder-zero-shot.json", "bi-encoder", ["dl19", "dl20", "dl21"]),
      # Microblog: QL's top 1000, measured under both rules at once
      **_models("microblog/{year}-bi-encoder-zero-shot-safe.json", "bi-encoder", ["mb2013", "mb2014"]),
      **{c: Source(f"{c}/bi-encoder-zero-shot.json", "bi-encoder")
         for c in ("nfcorpus", "wikiqa", "trecqa", "vaswani", "cranfield")}}),
    ("bi-encoder, zero-shot (MiniLM as packaged)", TUNED,
     {**_models("dl/{year}-bi-encoder-zero-shot.json", "bi-encoder+interp", ["dl19", "dl20", "dl21"]),
      **_models("microblog/{year}-bi-encoder-zero-shot-safe.json", "bi-encoder+interp", ["mb2013", "mb2014"]),
      **{c: Source(f"{c}/bi-encoder-zero-shot.json", "bi-encoder+interp")
         for c in ("nfcorpus", "wikiqa", "vaswani", "cranfield")}}),
    ("bi-encoder, zero-shot (MiniLM as packaged)", SAFE,
     {**{key: source for key, source in _models("dl/{year}-bi-encoder-zero-shot-safe.json", "bi-encoder+safe",
                                               ["dl19", "dl20", "dl21"]).items()
         if (RESULTS / source.file).is_file()},  # the DL years re-measured under the safe rule so far
      **_models("microblog/{year}-bi-encoder-zero-shot-safe.json", "bi-encoder+safe", ["mb2013", "mb2014"]),
      **{c: Source(f"{c}/bi-encoder-zero-shot-safe.json", "bi-encoder+safe")
         for c in ("nfcorpus", "wikiqa", "vaswani", "cranfield")}}),
    (FINE_TUNED_BI_ENCODER, ALONE, _fine_tuned_bi_encoder("")),
    (FINE_TUNED_BI_ENCODER, TUNED, _fine_tuned_bi_encoder("+interp")),
    (FINE_TUNED_BI_ENCODER, SAFE, _fine_tuned_bi_encoder("+safe")),
    (FINE_TUNED_BI_ENCODER, STACKED, _fine_tuned_stacked(["dl19", "dl20", "nfcorpus", "vaswani", "cranfield"])),
    (FINE_TUNED_BI_ENCODER, FALLBACK, {key: Source(source.file, FALLBACK_ROW)
                                       for key, source in _fine_tuned_bi_encoder("").items()}),
    (FINE_TUNED_BI_ENCODER, ANCHOR, _anchored(_fine_tuned_bi_encoder(""))),
    *[(QUERY_SIDE_BI_ENCODER, rule, {key: Source(file, "bi-encoder-query-side-bf16" + suffix)
                                     for key, file in QUERY_SIDE_RUNS.items()})
      for rule, suffix in ((ALONE, ""), (SAFE, "+safe"))],
    (QUERY_SIDE_BI_ENCODER, ANCHOR, _anchored({key: Source(file, "") for key, file in QUERY_SIDE_RUNS.items()})),
    *[(label, rule, {"nfcorpus": Source(file, row + suffix)})
      for label, file, row in DEV_SPLIT_RUNS for rule, suffix in ((ALONE, ""), (SAFE, "+safe"))],
    *[(label, ANCHOR, _anchored({"nfcorpus": Source(file, "")})) for label, file, _ in DEV_SPLIT_RUNS],
    *[(wise_ft_label(recipe), rule, {"dl19": Source(wise_ft_file(row), row + suffix)})
      for row, recipe in DL19_WISE_FT.items() for rule, suffix in ((ALONE, ""), (TUNED, "+interp"), (SAFE, "+safe"))],
    *[(wise_ft_label(recipe), ANCHOR, _anchored({"dl19": Source(wise_ft_file(row), row)}))
      for row, recipe in DL19_WISE_FT.items()],
    ("cross-encoder (MiniLM, 2 x 3,200 pairs)", STACKED,
     {key: source for key, source in {
         "mb2014": Source("microblog/2014-three-way-bi-encoder-cross-encoder.json", STACKED_ROW),
         "mb2013": Source("microblog/2013-three-way-bi-encoder-cross-encoder.json", STACKED_ROW)}.items()
      if (RESULTS / source.file).is_file()}),
    ("cross-encoder (MiniLM, 1 x 1,600 pairs, bf16 training)", STACKED,
     {key: source for key, source in {
         c: Source(f"{c}/three-way-bi-encoder-cross-encoder-bf16.json", STACKED_ROW)
         for c in ("cranfield", "nfcorpus")}.items()
      if (RESULTS / source.file).is_file()}),
    ("cross-encoder distilled from the zero-shot bi-encoder (weight 0.5, 2 x 640 groups of 5)", STACKED,
     {key: source for key, source in {
         "dl19": Source("dl/2019-three-way-bi-encoder-cross-encoder-distilled.json", STACKED_ROW),
         "dl20": Source("dl/2020-three-way-bi-encoder-cross-encoder-distilled.json", STACKED_ROW)}.items()
      if (RESULTS / source.file).is_file()}),
]


def first_stage_source(column: Column) -> Source | None:
    """The first JSON source of ``column`` in ``ROWS`` (every such file records the first stage's value)."""
    for _, _, cells in ROWS:
        source = cells.get(column.key)
        if source is not None and source.file.endswith(".json"):
            return source
    return None


def summary(values: list[float]) -> str:
    """``mean ± sd (n=N)`` with the sample sd, or ``value (n=1)``."""
    if len(values) == 1:
        return f"{values[0]:.4f} (n=1)"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f} (n={len(values)})"


def render() -> str:
    """The Markdown block: the metric line, the matrix, and the numbered sources its cells link to."""
    numbers: dict[str, int] = {}
    sources: list[Source] = []

    def link(source: Source) -> str:
        if source.file not in numbers:
            numbers[source.file] = len(numbers) + 1
            sources.append(source)
        number = numbers[source.file]
        return f"[{number}](#matrix-{number})"

    metrics = "; ".join(f"{c.label} {c.metric}" for c in COLUMNS)
    lines = [f"Main metric per collection: {metrics}. Mean ± sample sd over seeds (n = seeds); float32 unless "
             "marked bf16; \"—\" = not measured. The first row is the first stage alone (deterministic); "
             "\"tuned weight\" is the weight tuned on the dev queries, \"safe rule\" is the current "
             "`--interpolate auto`: the tuned weight when its cross-validated gain is significant, half-way from "
             "the first stage towards it when the gain is positive but not significant, else the first stage "
             "(replayed from each file's per-weight test values where it records them). Each cell links to its "
             "result file and the command that wrote it (the list under the matrix). Regenerate with "
             "`python benchmarks/matrix.py --update BENCHMARKS.md`.",
             "",
             "| model | " + " | ".join(f"{c.label}<br>{c.metric}, {c.first_stage}" for c in COLUMNS) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    first = ["first stage"]
    for column in COLUMNS:
        source = first_stage_source(column)
        if source is None:
            first.append("—")
        else:
            value = load_json(source.file)["first_stage"][column.metric]
            first.append(f"{value:.4f} {link(source)}")
    lines.append("| " + " | ".join(first) + " |")
    for model, combination, cells in ROWS:
        out = [model + combination]
        for column in COLUMNS:
            source = cells.get(column.key)
            if source is None:
                out.append("—")
                continue
            mark = f" {source.precision()}" if source.precision() else ""
            out.append(f"{summary(source.values(column.metric))}{mark} {link(source)}")
        lines.append("| " + " | ".join(out) + " |")
    lines.append("")
    for number, source in enumerate(sources, 1):
        lines.append(f"- <a id=\"matrix-{number}\"></a>{number}. `benchmarks/results/{source.file}`: "
                     f"`{source.command()}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    tables_main(argv, __doc__.split("\n\n")[0], lambda: {NAME: render()})


if __name__ == "__main__":
    main()
