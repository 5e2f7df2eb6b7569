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
from typing import Callable

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


def zero_shot(file: str) -> Model:
    """The bi-encoder (MiniLM as packaged, no training) of result file ``file``."""
    return Model("bi-encoder, zero-shot", file, "bi-encoder")


def cross_validated(name: str, metric: str) -> Collection:
    """A collection of 5-fold cross-validation by query (its folder is ``name`` in lower case): KNRM and the
    zero-shot bi-encoder re-rank BM25's top 100."""
    folder = name.lower()
    return Collection(name, "5-fold CV by query", metric, "BM25 top-100", Model("KNRM", f"{folder}/knrm.json", "knrm"),
                      zero_shot(f"{folder}/bi-encoder-zero-shot.json"))


def trec_dl(year: int) -> Collection:
    """TREC DL ``year`` (2019-2021), trained on the other two years: DRMM and the zero-shot bi-encoder."""
    others = "+".join(str(y)[2:] for y in (2019, 2020, 2021) if y != year)
    return Collection(f"DL{str(year)[2:]}", f"train DL{others}", "nDCG@10", "BM25 top-100",
                      Model("DRMM", f"dl/{year}-knrm-drmm.json", "drmm"),
                      zero_shot(f"dl/{year}-bi-encoder-zero-shot.json"))


def microblog(year: int, trained_on: str, hcan: Model) -> Collection:
    """TREC Microblog ``year`` (QL top 1,000): ``hcan`` and the cross-encoder re-ranking 1,000 tweets."""
    return Collection(f"Microblog {year}", f"train {trained_on}", "AP", "QL top-1000", hcan,
                      Model("cross-encoder", f"microblog/{year}-transformers-depth1000-3seeds.json", "cross-encoder"))


#: the table's lines; each cell comes from the named file
COLLECTIONS = [
    cross_validated("Cranfield", "AP"),
    cross_validated("Vaswani", "AP"),
    cross_validated("NFCorpus", "nDCG@10"),
    microblog(2013, "2011, 2012, 2014",
              Model("HCAN (hinge, up to 20 epochs)", "microblog/2013-hcan-hinge-all.json", "hcan-HCAN")),
    microblog(2014, "2011-2013", Model("HCAN (the headline's recipe)", "microblog/2014-hcan-headline.json", "hcan")),
    Collection("WikiQA (237 q)", "train / dev / test-filtered", "AP", "page order",
               Model("Bi-Match-SRNN", "wikiqa/match-srnn.json", "bi-match-srnn"),
               zero_shot("wikiqa/bi-encoder-zero-shot.json")),
    Collection("TrecQA raw-test", "train / raw-dev / raw-test", "AP", "file order (correct first)",
               Model("HCAN", "trecqa/hcan.json", "hcan-HCAN"), zero_shot("trecqa/bi-encoder-zero-shot.json")),
    *(trec_dl(year) for year in (2019, 2020, 2021)),
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


def tables_main(argv: list[str] | None, description: str, tables: Callable[[], dict[str, str]]) -> None:
    """The command line of every script that renders tables of BENCHMARKS.md from result files: print them;
    ``--output FILE`` also writes them there, ``--update MARKDOWN`` replaces each block ``<!-- NAME:begin -->``
    ... ``<!-- NAME:end -->`` of that file by its table (both atomically).

    Args:
        argv: the arguments (``None``: ``sys.argv[1:]``).
        description: the script's one-line description for ``--help``.
        tables: renders ``{block name: table}`` (called after the arguments are parsed).

    Example:
        >>> tables_main(["--update", "BENCHMARKS.md"], "Tables", lambda: {"dl": render_dl()})  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", help="write the tables here (atomically)")
    parser.add_argument("--update", metavar="MARKDOWN",
                        help="replace the tables between the markers in this file (e.g. BENCHMARKS.md)")
    args = parser.parse_args(argv)
    from pipeline.core.atomic import atomic_write

    rendered = tables()
    if args.output:
        with atomic_write(args.output) as handle:
            handle.write("\n".join(rendered.values()))
    if args.update:
        text = Path(args.update).read_text(encoding="utf-8")
        for name, table in rendered.items():
            text = replace_block(text, name, table, args.update)
        with atomic_write(args.update) as handle:
            handle.write(text)
    print("\n".join(rendered.values()), end="")


def main(argv: list[str] | None = None) -> None:
    tables_main(argv, __doc__.split("\n\n")[0], lambda: {"effectiveness": render(COLLECTIONS), "dl": render_dl()})


if __name__ == "__main__":
    main()
