"""The effectiveness table at the top of BENCHMARKS.md, rendered from ``reproduce.py`` result files.

For every shipped collection: the first stage, the best word-level re-ranker and the best transformer
re-ranker, each alone and combined with the first stage (``--interpolate auto``), as mean ± sample sd over
seeds on the collection's main metric, with how many seeds are significantly above or below the first
stage (paired t-test, p < .05, Holm-corrected over the rows of that run) where the result file recorded
p-values. Nothing is computed here: each cell is read from the JSON a command wrote, and the table names
the file. Run ``python benchmarks/effectiveness.py`` to print it (``--output`` writes it atomically).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Model:
    """One re-ranker's rows in one result file: ``row`` alone and ``row+interp`` combined."""

    label: str
    file: str
    row: str


@dataclass(frozen=True)
class Collection:
    """One line of the table."""

    name: str
    protocol: str
    metric: str
    first_stage: str
    word: Model | None
    transformer: Model | None
    note: str = ""


def load(file: str) -> dict:
    """A result file of ``benchmarks/results`` (``.json`` written by ``reproduce.py``)."""
    path = RESULTS / file
    return json.loads(path.read_text(encoding="utf-8"))


def summary(values: list[float]) -> str:
    """``mean ± sd`` (sample sd) over seeds, or the value and ``(1 seed)`` for one seed."""
    if len(values) == 1:
        return f"{values[0]:.4f} (1 seed)"
    text = f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"
    return text if len(values) == 3 else f"{text} ({len(values)} seeds)"


def significance(row: dict, metric: str, first: float) -> str:
    """How many seeds are significantly above / below the first stage, or a dash when no p-value was kept."""
    pvalues = row.get(f"p:{metric}")
    if not pvalues or all(p is None or (isinstance(p, float) and math.isnan(p)) for p in pvalues):
        return "n/r"
    above = sum(1 for p, v in zip(pvalues, row[metric]) if p is not None and p < SIGNIFICANCE and v > first)
    below = sum(1 for p, v in zip(pvalues, row[metric]) if p is not None and p < SIGNIFICANCE and v < first)
    return f"{above}↑ {below}↓ /{len(pvalues)}"


def cells(model: Model | None, metric: str) -> list[str]:
    """Alone, its significance, combined, its significance (``not run`` when there is no model or file)."""
    if model is None or not (RESULTS / model.file).is_file():
        return ["not run", "", "not run", ""]
    data = load(model.file)
    first = data["first_stage"][metric]
    out = []
    for name in (model.row, f"{model.row}+interp"):
        row = data["results"].get(name)
        if row is None:
            out += ["not run", ""]
        else:
            out += [summary(row[metric]), significance(row, metric, first)]
    return out


def first_stage_value(collection: Collection) -> str:
    for model in (collection.word, collection.transformer):
        if model is not None and (RESULTS / model.file).is_file():
            return f"{load(model.file)['first_stage'][collection.metric]:.4f}"
    return "not run"


def render(collections: list[Collection]) -> str:
    """The Markdown table and the list of result files and commands under it."""
    lines = ["| collection | protocol | metric | first stage | word-level re-ranker | alone | sig. | combined | sig. "
             "| transformer re-ranker | alone | sig. | combined | sig. |",
             "|---" * 14 + "|"]
    sources = []
    for c in collections:
        word, transformer = cells(c.word, c.metric), cells(c.transformer, c.metric)
        lines.append(f"| {c.name} | {c.protocol} | {c.metric} | {c.first_stage} {first_stage_value(c)} "
                     f"| {c.word.label if c.word else ''} | " + " | ".join(word)
                     + f" | {c.transformer.label if c.transformer else ''} | " + " | ".join(transformer) + " |")
        for model in (c.word, c.transformer):
            if model is not None and (RESULTS / model.file).is_file():
                sources.append(f"- {c.name}, {model.label}: `benchmarks/results/{model.file}`, command: "
                               f"`python {load(model.file)['command']}`")
        if c.note:
            sources.append(f"- {c.name}: {c.note}")
    return "\n".join(lines) + "\n\n" + "\n".join(sources) + "\n"


#: the table's lines; each cell comes from the named file
COLLECTIONS = [
    Collection("Cranfield", "5-fold CV by query", "AP", "BM25 top-100",
               Model("KNRM", "cranfield/knrm.json", "knrm"),
               Model("bi-encoder, zero-shot", "cranfield/bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("Vaswani", "5-fold CV by query", "AP", "BM25 top-100",
               Model("KNRM", "vaswani/knrm.json", "knrm"),
               Model("bi-encoder, zero-shot", "vaswani/bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("NFCorpus", "5-fold CV by query", "nDCG@10", "BM25 top-100",
               Model("KNRM", "nfcorpus/knrm.json", "knrm"),
               Model("bi-encoder, zero-shot", "nfcorpus/bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("Microblog 2013", "train 2011, 2012, 2014", "AP", "QL top-1000",
               Model("HCAN (hinge, up to 20 epochs)", "microblog/2013-hcan-hinge-all.json", "hcan-HCAN"),
               Model("cross-encoder", "microblog/2013-transformers-depth1000-3seeds.json", "cross-encoder")),
    Collection("Microblog 2014", "train 2011-2013", "AP", "QL top-1000",
               Model("HCAN (the headline's recipe)", "microblog/2014-hcan-headline.json", "hcan"),
               Model("cross-encoder", "microblog/2014-transformers-depth1000-3seeds.json", "cross-encoder")),
    Collection("WikiQA (237 q)", "train / dev / test-filtered", "AP", "page order",
               Model("Bi-Match-SRNN", "wikiqa/match-srnn.json", "bi-match-srnn"),
               Model("bi-encoder, zero-shot", "wikiqa/bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("TrecQA raw-test", "train / raw-dev / raw-test", "AP", "file order (correct first)",
               Model("HCAN", "trecqa/hcan.json", "hcan-HCAN"),
               Model("bi-encoder, zero-shot", "trecqa/bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("DL19", "train DL20+21", "nDCG@10", "BM25 top-100",
               Model("DRMM", "dl/2019-knrm-drmm.json", "drmm"),
               Model("bi-encoder, zero-shot", "dl/2019-bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("DL20", "train DL19+21", "nDCG@10", "BM25 top-100",
               Model("DRMM", "dl/2020-knrm-drmm.json", "drmm"),
               Model("bi-encoder, zero-shot", "dl/2020-bi-encoder-zero-shot.json", "bi-encoder")),
    Collection("DL21", "train DL19+20", "nDCG@10", "BM25 top-100",
               Model("DRMM", "dl/2021-knrm-drmm.json", "drmm"),
               Model("bi-encoder, zero-shot", "dl/2021-bi-encoder-zero-shot.json", "bi-encoder")),
]


#: TREC DL leave-one-year-out: (label, file pattern with {year}, row name)
DL_MODELS = [
    ("bi-encoder, zero-shot (MiniLM as packaged)", "dl/{year}-bi-encoder-zero-shot.json", "bi-encoder"),
    ("cross-encoder (MiniLM + new head, 2 epochs x 3,200 pairs)", "dl/{year}-cross-encoder.json", "cross-encoder"),
    ("ADDAX (MiniLM, 2 epochs x 3,200 pairs)", "dl/{year}-addax.json", "addax"),
    ("HCAN (2 epochs x 3,200 pairs)", "dl/{year}-hcan.json", "hcan"),
    ("KNRM", "dl/{year}-knrm-drmm.json", "knrm"),
    ("DRMM", "dl/{year}-knrm-drmm.json", "drmm"),
]
DL_MEASURES = ("nDCG@10", "AP(rel=2)")


def render_dl(years=("2019", "2020")) -> str:
    """The TREC DL table: per model and test year, nDCG@10 and AP (grades >= 2), alone and combined."""
    head = "| model | " + " | ".join(f"DL{y[2:]} {m} {kind}" for y in years for m in DL_MEASURES
                                     for kind in ("alone", "combined")) + " |"
    lines = [head, "|---" * (1 + 4 * len(years)) + "|"]
    first = ["BM25 (first stage)"]
    for year in years:
        found = next((RESULTS / f.format(year=year) for _, f, _ in DL_MODELS
                      if (RESULTS / f.format(year=year)).is_file()), None)
        for measure in DL_MEASURES:
            value = f"{json.loads(found.read_text())['first_stage'][measure]:.4f}" if found else "not run"
            first += [value, ""]
    lines.append("| " + " | ".join(first) + " |")
    sources = []
    for label, pattern, row in DL_MODELS:
        out = [label]
        for year in years:
            path = RESULTS / pattern.format(year=year)
            data = json.loads(path.read_text()) if path.is_file() else None
            for measure in DL_MEASURES:
                for name in (row, f"{row}+interp"):
                    values = data["results"].get(name, {}).get(measure) if data else None
                    if values:
                        sig = significance(data["results"][name], measure, data["first_stage"][measure])
                        out.append(f"{summary(values)} ({sig})")
                    else:
                        out.append("not run")
            if data is not None:
                sources.append(f"- {label}, DL{year[2:]}: `benchmarks/results/{pattern.format(year=year)}`, "
                               f"command: `python {data['command']}`")
        lines.append("| " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(dict.fromkeys(sources)) + "\n"


def replace_block(text: str, name: str, table: str, source: str = "the file") -> str:
    """``text`` with the lines between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` replaced by ``table``
    (every table renderer of BENCHMARKS.md writes through this; a missing marker stops with ``source``)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"{source}: no {begin} ... {end} block to replace")
    head, rest = text.split(begin, 1)
    return head + begin + "\n" + table + rest[rest.index(end):]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="write the tables here (atomically)")
    parser.add_argument("--update", metavar="MARKDOWN",
                        help="replace the tables between the markers in this file (e.g. BENCHMARKS.md)")
    args = parser.parse_args(argv)
    from pipeline.core.atomic import atomic_write

    tables = {"effectiveness": render(COLLECTIONS), "dl": render_dl()}
    if args.output:
        with atomic_write(args.output) as handle:
            handle.write("\n".join(tables.values()))
    if args.update:
        text = Path(args.update).read_text(encoding="utf-8")
        for name, table in tables.items():
            text = replace_block(text, name, table, args.update)
        with atomic_write(args.update) as handle:
            handle.write(text)
    print("\n".join(tables.values()), end="")


if __name__ == "__main__":
    main()
