"""The per-paper reproduction tables of BENCHMARKS.md, rendered from result files.

One table per paper (HCAN, IASM, Match-SRNN, aMV-LSTM, ADDAX): for each row the dataset, the model, the
metric(s), the paper's number and ours (mean ± sample sd over seeds), and the result file it comes from;
under the table, the command that wrote each result file. Nothing is computed here beyond mean and sd:
a number is either read from the JSON that ``reproduce.py`` wrote (:class:`Measured`: file, row, metric),
or, where the measurement was only ever written as Markdown, kept as the text copied from that file
(:class:`Copied`, which names the file and line it came from).

    python benchmarks/reproductions.py                          # print the tables
    python benchmarks/reproductions.py --update BENCHMARKS.md   # rewrite the marked blocks in place

``--update`` replaces the text between ``<!-- reproduction:<paper>:begin -->`` and
``<!-- reproduction:<paper>:end -->`` for every paper below, atomically, as ``effectiveness.py`` does for
its tables.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from effectiveness import replace_block, summary, tables_main  # noqa: E402  (the same "mean ± sd" text and markers as the effectiveness table)

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Measured:
    """A number in a ``reproduce.py`` result JSON: ``results[row][metric]`` over seeds, or, with ``row``
    None, the file's ``first_stage[metric]`` (one value, the same for every seed)."""

    file: str
    row: str | None
    metric: str

    def text(self) -> str:
        """The cell: ``mean ± sd`` over seeds (``summary``), or the first stage's value."""
        data = load(self.file)
        if self.row is None:
            return f"{data['first_stage'][self.metric]:.4f}"
        return summary(data["results"][self.row][self.metric])

    def command(self) -> str:
        """The command the JSON records (``reproduce.py`` writes it without the interpreter), as Markdown."""
        return f"`python {load(self.file)['command']}`"


@dataclass(frozen=True)
class Copied:
    """A number whose measurement exists only as Markdown: ``value`` is copied verbatim from line ``line``
    of ``origin`` (a result file, or BENCHMARKS.md at the commit named, for numbers that were computed
    from run files and never written to a result file). ``file`` is the result file the table cites (None:
    the command only printed it); ``how`` is the command that produced it, as Markdown."""

    value: str
    origin: str
    line: int
    how: str
    file: str | None

    def text(self) -> str:
        """The cell, as copied."""
        return self.value

    def command(self) -> str:
        """The command (or procedure) that produced the number, as Markdown."""
        return self.how


Source = Measured | Copied


@dataclass(frozen=True)
class Row:
    """One line of a reproduction table; ``ours`` has one source per metric (cells joined with `` / ``)."""

    dataset: str
    model: str
    metric: str
    paper: str
    ours: tuple[Source, ...]

    def file(self) -> str | None:
        """The result file the row cites (every source of a row comes from one file)."""
        files = {source.file for source in self.ours}
        if len(files) != 1:
            raise ValueError(f"{self.model}: the sources of one row must come from one file, "
                             f"got {sorted(map(str, files))}")
        return files.pop()


@dataclass(frozen=True)
class Paper:
    """One paper's table: ``key`` names its marker block in BENCHMARKS.md."""

    key: str
    rows: tuple[Row, ...]


def load(file: str) -> dict:
    """A result file of ``benchmarks/results`` (JSON written by ``reproduce.py``)."""
    return json.loads((RESULTS / file).read_text(encoding="utf-8"))


def measured(file: str, row: str | None, *metrics: str) -> tuple[Measured, ...]:
    """One :class:`Measured` per metric, all from ``file``'s ``row``."""
    return tuple(Measured(file, row, metric) for metric in metrics)


def copied(origin: str, line: int, how: str, file: str | None, *values: str) -> tuple[Copied, ...]:
    """One :class:`Copied` per value, all from line ``line`` of ``origin`` (see :class:`Copied`)."""
    return tuple(Copied(value, origin, line, how, file) for value in values)


#: the WikiQA test questions with at least one correct and one wrong answer (the usual filter), and all 243
#: questions with a correct answer (ADDAX's filter)
WIKIQA, WIKIQA_243 = "WikiQA test-filtered (237 q)", "WikiQA test (243 q)"


def map_mrr(dataset: str, model: str, paper: str, file: str, row: str) -> Row:
    """A question-answering row: MAP / MRR (``AP`` / ``RR``) of ``file``'s ``row`` against the paper's."""
    return Row(dataset, model, "MAP / MRR", paper, measured(file, row, "AP", "RR"))


def render(paper: Paper) -> str:
    """The Markdown table of one paper and, under it, the command behind each result file it cites."""
    lines = ["| dataset | model | metric | paper | ours (mean ± sd over seeds) | result file |",
             "|---|---|---|---|---|---|"]
    # one line per (result file, command): a file can back rows measured in two ways (TrecQA's 89 answered
    # questions are its runs evaluated again); rows with no file are named by their dataset and model, once
    # per command
    commands: dict[tuple[str, str], None] = {}
    for row in paper.rows:
        file = row.file()
        where = f"`benchmarks/results/{file}`" if file else "not saved (the command prints it)"
        ours = " / ".join(source.text() for source in row.ours)
        lines.append(f"| {row.dataset} | {row.model} | {row.metric} | {row.paper} | {ours} | {where} |")
        command = row.ours[0].command()
        if file or all(command != seen for _, seen in commands):
            commands.setdefault((where if file else f"{row.dataset}, {row.model}", command))
    sources = [f"- {key}: {command}" for key, command in commands]
    return "\n".join(lines) + "\n\n" + "\n".join(sources) + "\n"


# --- HCAN (Rao, Yang, Zhang, Lin: Bridging the gap between relevance matching and semantic matching for
# --- short text similarity modeling, EMNLP 2019): TrecQA raw-test (Table 2, TRAIN-ALL) and TREC Microblog
# --- (Table 3), whose rows also hold the paper's DRMM, K-NRM and BERT baselines.

#: the 89-answered-question numbers were computed from the runs of trecqa/hcan.json and written only into
#: BENCHMARKS.md (at commit 3016533, lines 327-329); the procedure is the one quoted here
TRECQA_ANSWERED = ("89 answered questions: its runs (`runs/reproduce/trecqa-raw-test-hcan-*.run`) evaluated with "
                   "`pipeline.core.evaluation.evaluate` on `load_dataset(\"trecqa\").subset(answered)`")
#: microblog/<year>-models.md have no JSON; their header comment is the command
MICROBLOG_MODELS = ("python benchmarks/reproduce.py --dataset microblog --split {year} --reranker drmm --reranker knrm "
                    "--reranker matchpyramid --reranker conv-knrm --reranker mvlstm --reranker amvlstm --reranker iasm "
                    "--reranker iasm-static --reranker match-srnn --reranker bi-match-srnn --seeds 1 2 3 --metrics "
                    "\"AP P@30\" --threads 1 --set max_examples_per_epoch=6400 --set dev_depth=100 --k 1000")


def _trecqa_answered(model: str, line: int, map_value: str, mrr_value: str) -> Row:
    how = TRECQA_ANSWERED
    return Row("TrecQA raw-test, 89 answered q (trec_eval's convention)", model, "MAP / MRR", PAPER_TRECQA[model],
               copied("BENCHMARKS.md@3016533", line, how, "trecqa/hcan.json", map_value, mrr_value))


#: HCAN Table 2 (TrecQA raw, TRAIN-ALL), MAP / MRR
PAPER_TRECQA = {"RM": ".756 / .812", "SM": ".663 / .725", "HCAN": ".774 / .843"}
#: HCAN Table 3, MAP / P@30 per year: the three variants, and the baselines of that table we ran
PAPER_MICROBLOG = {
    "2013": {"RM": ".2818 / .5222", "SM": ".1365 / .2411", "HCAN": ".2920 / .5328", "QL": ".2532 / .4450",
             "DRMM": ".2102 / .4061", "K-NRM": ".1750 / .3178", "BERT": ".3357 / .5656"},
    "2014": {"RM": ".4304 / .6297", "SM": ".2414 / .3279", "HCAN": ".4365 / .6485", "QL": ".3924 / .6182",
             "DRMM": ".3440 / .5424", "K-NRM": ".3472 / .5388", "BERT": ".5176 / .7006"},
}
#: DRMM / KNRM rows copied from microblog/<year>-models.md (no JSON was written): (line, MAP, P@30)
MICROBLOG_BASELINES = {
    "2013": {"DRMM": (4, "0.2105 ± 0.0041", "0.4204 ± 0.0085"), "K-NRM": (5, "0.1916 ± 0.0251", "0.3781 ± 0.0485")},
    "2014": {"DRMM": (4, "0.3344 ± 0.0103", "0.5451 ± 0.0134"), "K-NRM": (5, "0.3197 ± 0.0333", "0.5152 ± 0.0467")},
}


def _microblog_rows(year: str) -> list[Row]:
    data, paper = f"Microblog {year}", PAPER_MICROBLOG[year]
    hcan, transformers = f"microblog/{year}-hcan-hinge-all.json", f"microblog/{year}-transformers-depth1000-3seeds.json"
    rows = [Row(data, "QL (shipped first stage)", "MAP / P@30", paper["QL"], measured(hcan, None, "AP", "P@30"))]
    for variant in ("RM", "SM", "HCAN"):
        rows.append(Row(data, variant, "MAP / P@30", paper[variant],
                        measured(hcan, f"hcan-{variant}", "AP", "P@30")))
        rows.append(Row(data, f"{variant} + QL", "MAP / P@30", paper[variant],
                        measured(hcan, f"hcan-{variant}+interp", "AP", "P@30")))
    cosine = f"microblog/{year}-hcan-cosine-hinge.json"
    rows.append(Row(data, "HCAN, `--set rm_softmax_over=none` (cosine RM, not the paper's)", "MAP / P@30",
                    paper["HCAN"], measured(cosine, "hcan-HCAN-cosine", "AP", "P@30")))
    rows.append(Row(data, "HCAN, `rm_softmax_over=none`, + QL", "MAP / P@30", paper["HCAN"],
                    measured(cosine, "hcan-HCAN-cosine+interp", "AP", "P@30")))
    for model, (line, map_value, p30_value) in MICROBLOG_BASELINES[year].items():
        file, how = f"microblog/{year}-models.md", f"`{MICROBLOG_MODELS.format(year=year)}`"
        rows.append(Row(data, model.replace("K-NRM", "KNRM"), "MAP / P@30", paper[model],
                        copied(file, line, how, file, map_value, p30_value)))
    for model, row, label in (("cross-encoder", "cross-encoder", "cross-encoder (MiniLM, 2 x 3,200 pairs)"),
                              ("addax", "addax", "ADDAX (MiniLM, 2 x 3,200 pairs)")):
        bert = f"BERT: {paper['BERT']}" if model == "cross-encoder" else "—"
        rows.append(Row(data, label, "MAP / P@30", bert, measured(transformers, row, "AP", "P@30")))
        rows.append(Row(data, f"{label} + QL", "MAP / P@30", bert,
                        measured(transformers, f"{row}+interp", "AP", "P@30")))
    return rows


def _microblog_other_years(year: str) -> list[Row]:
    data, hcan = f"Microblog {year}", f"microblog/{year}-hcan-hinge-all.json"
    return [Row(data, "QL (shipped first stage)", "MAP / P@30", "not reported", measured(hcan, None, "AP", "P@30")),
            Row(data, "HCAN", "MAP / P@30", "not reported", measured(hcan, "hcan-HCAN", "AP", "P@30")),
            Row(data, "HCAN + QL", "MAP / P@30", "not reported", measured(hcan, "hcan-HCAN+interp", "AP", "P@30"))]


HCAN = Paper("hcan", tuple(
    [Row("TrecQA raw-test, all 95 q (ir-measures)", m, "MAP / MRR", PAPER_TRECQA[m],
         measured("trecqa/hcan.json", f"hcan-{m}", "AP", "RR")) for m in ("RM", "SM", "HCAN")]
    + [_trecqa_answered("RM", 327, "0.7304 ± 0.0173", "0.7832 ± 0.0170"),
       _trecqa_answered("SM", 328, "0.6483 ± 0.0160", "0.7012 ± 0.0233"),
       _trecqa_answered("HCAN", 329, "0.7467 ± 0.0115", "0.8041 ± 0.0157")]
    + _microblog_rows("2013") + _microblog_rows("2014")
    + _microblog_other_years("2011") + _microblog_other_years("2012")))


# --- IASM (Zhao et al., ICDM 2020): the PubMed title -> abstract task (Table III) on NFCorpus titles, and
# --- the smoothing statistic of Table VII.

TITLES = "nfcorpus/titles-models-3seeds.json"
#: titles_full_ranking.py wrote only Markdown (seed 1); its header comment is the command
FULL_RANKING = ("python benchmarks/titles_full_ranking.py --reranker drmm --reranker matchpyramid --reranker iasm "
                "--reranker mvlstm --seeds 1 --set max_examples_per_epoch=6400 --set dev_depth=100 --k 100 --threads 1 "
                "--output benchmarks/results/nfcorpus/titles-full-ranking.md")
#: iasm_smoothing.py prints its table and writes no file; the numbers are BENCHMARKS.md@3016533 lines 499-500
SMOOTHING = ("python benchmarks/iasm_smoothing.py --dataset wikiqa --split test-filtered --seeds 1 2 3 "
             "--set max_examples_per_epoch=6400")
#: the BM25 row of the titles task comes from its own pipeline.run (BENCHMARKS.md@3016533 line 586); the
#: first stage recorded in nfcorpus/titles-models-3seeds.json rounds to 0.8802, not 0.8803
TITLES_BM25 = 'python -m pipeline.run --dataset nfcorpus-titles --split test --metrics "P@1 RR AP R@100"'


ALL_ABSTRACTS = "NFCorpus titles, all 338 test abstracts ranked (3 seeds)"
FULL_DRMM = "nfcorpus/titles-full-ranking-drmm.json"
FULL_IASM = "nfcorpus/titles-full-ranking-iasm-3layers.json"
FULL_IASM_SOFTMAX = "nfcorpus/titles-full-ranking-iasm-softmax.json"


def _full(model: str, line: int, p1: str, mrr: str, paper: str) -> Row:
    file = "nfcorpus/titles-full-ranking.md"
    return Row("NFCorpus titles, all 338 test abstracts ranked (seed 1)", model, "P@1 / MRR", paper,
               copied(file, line, f"`{FULL_RANKING}`", file, p1, mrr))


IASM = Paper("iasm", (
    Row("NFCorpus titles, BM25 top 100 (338 q)", "BM25 (first stage)", "P@1 / MRR", "—",
        copied("BENCHMARKS.md@3016533", 586, f"`{TITLES_BM25}`", None, "0.8225", "0.8803")),
    Row("NFCorpus titles, BM25 top 100 (338 q)", "IASM (dynamic)", "P@1 / MRR", ".2474 / .3749",
        measured(TITLES, "iasm", "P@1", "RR")),
    Row("NFCorpus titles, BM25 top 100 (338 q)", "IASM (static)", "P@1 / MRR", "—",
        measured(TITLES, "iasm-static", "P@1", "RR")),
    Row("NFCorpus titles, BM25 top 100 (338 q)", "DRMM", "P@1 / MRR", ".1246 / .2245",
        measured(TITLES, "drmm", "P@1", "RR")),
    Row(ALL_ABSTRACTS, "BM25 over the 338 test abstracts", "P@1 / MRR", "—",
        measured(FULL_DRMM, None, "P@1", "MRR")),
    Row(ALL_ABSTRACTS, "IASM (dynamic, 3 layers: the paper's PubMed depth)", "P@1 / MRR", ".2474 / .3749",
        measured(FULL_IASM, "iasm", "P@1", "MRR")),
    Row(ALL_ABSTRACTS, "IASM (dynamic, 3 layers, `--set aggregation=softmax`: not the paper's)", "P@1 / MRR",
        ".2474 / .3749", measured(FULL_IASM_SOFTMAX, "iasm", "P@1", "MRR")),
    Row(ALL_ABSTRACTS, "DRMM", "P@1 / MRR", ".1246 / .2245", measured(FULL_DRMM, "drmm", "P@1", "MRR")),
    _full("IASM (dynamic, 5 layers: the default, the paper's YodaQA depth)", 7, "0.1391", "0.2264", ".2474 / .3749"),
    Row("WikiQA test-filtered, 2,341 test pairs", "IASM (dynamic, 5 layers)",
        "share of pairs whose matching-matrix variance drops (all / relevant)", "drops (Table VII's direction)",
        copied("BENCHMARKS.md@3016533", 499, f"`{SMOOTHING}`", None, "1.000 (every seed)", "1.000")),
    Row("WikiQA test-filtered, 2,341 test pairs", "IASM (static)",
        "share of pairs whose matching-matrix variance drops (all / relevant)", "—",
        copied("BENCHMARKS.md@3016533", 500, f"`{SMOOTHING}`", None, "0.000", "0.000")),
))


# --- Match-SRNN (Wan et al., IJCAI 2016): the LCS simulation of Sec. 5.2, Match-SRNN against Bi-Match-SRNN.

LCS = "python benchmarks/match_srnn.py --output benchmarks/results/match-srnn/lcs-simulation.md"

MATCH_SRNN = Paper("match-srnn", (
    Row("LCS simulation (10,000 / 1,000 pairs)", "Match-SRNN, 10-d states", "test RMSE / exact LCS length", "—",
        copied("match-srnn/lcs-simulation.md", 7, f"`{LCS}`", "match-srnn/lcs-simulation.md", "0.0159", "100.0%")),
    Row("LCS simulation (10,000 / 1,000 pairs)", "Match-SRNN, 1-d states (Fig. 4's setting)",
        "test RMSE / exact LCS length", "—",
        copied("match-srnn/lcs-simulation.md", 6, f"`{LCS}`", "match-srnn/lcs-simulation.md", "0.1049", "67.7%")),
    Row("NFCorpus titles, BM25 top 100 (338 q)", "Match-SRNN", "P@1 / MRR", "— / .879 (Table 1, its QA data)",
        measured(TITLES, "match-srnn", "P@1", "RR")),
    Row("NFCorpus titles, BM25 top 100 (338 q)", "Bi-Match-SRNN", "P@1 / MRR", "— / .882 (Table 1, its QA data)",
        measured(TITLES, "bi-match-srnn", "P@1", "RR")),
    map_mrr(WIKIQA, "Match-SRNN", "— (MatchZoo-py notebook: .6209 MAP)", "wikiqa/match-srnn.json", "match-srnn"),
    map_mrr(WIKIQA, "Match-SRNN, frozen embeddings", "—", "wikiqa/match-srnn.json", "match-srnn-frozen"),
    map_mrr(WIKIQA, "Bi-Match-SRNN", "—", "wikiqa/match-srnn.json", "bi-match-srnn"),
    map_mrr(WIKIQA, "Bi-Match-SRNN, frozen embeddings", "—", "wikiqa/match-srnn.json", "bi-match-srnn-frozen"),
))


# --- MV-LSTM / aMV-LSTM (Belkacem et al., SAC 2019): WikiQA, the paper's MAP on its own 80/10/10 split.

#: wikiqa/models.md has no JSON; its header comment is the command (its last model, hcan, did not run)
WIKIQA_MODELS = ("python benchmarks/reproduce.py --dataset wikiqa --split test-filtered --reranker knrm --reranker drmm "
                 "--reranker matchpyramid --reranker conv-knrm --reranker iasm --reranker iasm-static --reranker mvlstm "
                 "--reranker amvlstm --seeds 1 2 3 --metrics \"AP RR nDCG@3 nDCG@5\" --threads 1 "
                 "--set max_examples_per_epoch=6400")

AMVLSTM = Paper("amvlstm", (
    Row(WIKIQA, "MV-LSTM", "MAP / MRR", ".6046 / —",
        copied("wikiqa/models.md", 11, f"`{WIKIQA_MODELS}`", "wikiqa/models.md",
               "0.6171 ± 0.0141", "0.6327 ± 0.0154")),
    Row(WIKIQA, "aMV-LSTM (Q)", "MAP / MRR", ".6507 / —",
        copied("wikiqa/models.md", 12, f"`{WIKIQA_MODELS}`", "wikiqa/models.md",
               "0.6021 ± 0.0118", "0.6172 ± 0.0132")),
    map_mrr(WIKIQA, "aMV-LSTM (A)", ".6022 / —", "wikiqa/amvlstm-sides.json", "amvlstm-a"),
    map_mrr(WIKIQA, "aMV-LSTM (Q+A)", ".5562 / —", "wikiqa/amvlstm-sides.json", "amvlstm-qa"),
))


# --- ADDAX (Li, Li and Guo, COLING 2022): WikiQA (Table 2's ADDAX row and Table 3's ablations), MiniLM for
# --- the paper's BERT-base.

ADDAX = Paper("addax", (
    map_mrr("WikiQA test (243 q, the paper's filter)", "ADDAX, paper's recipe (18 epochs, patience 3)", ".8250 / .8338",
            "wikiqa/test243-paper18-addax-3seeds.json", "addax"),
    map_mrr(WIKIQA, "ADDAX, paper's recipe", "— (243 q only)", "wikiqa/paper18-addax-3seeds.json", "addax"),
    map_mrr(WIKIQA_243, "Att-MAGS, paper's recipe", ".7979 / —",
            "wikiqa/test243-paper18-attmags-3seeds.json", "addax-att-mags"),
    map_mrr(WIKIQA, "Att-MAGS, paper's recipe", ".7979 / —", "wikiqa/paper18-attmags-3seeds.json", "addax-att-mags"),
    map_mrr(WIKIQA, "w/o HD, paper's recipe", ".8015 / —", "wikiqa/paper18-nohd-seed1.json", "addax-no-hd"),
    map_mrr(WIKIQA, "ADDAX, short budget (2 x 3,200 pairs): the next two rows' control", ".8250 / .8338",
            "wikiqa/transformers-3seeds.json", "addax"),
    map_mrr(WIKIQA, "w/o MAGS, short budget", ".7720 / —", "wikiqa/addax-ablations-3seeds.json", "addax-no-mags"),
    map_mrr(WIKIQA, "w/o HW, short budget", ".7901 / —", "wikiqa/addax-ablations-3seeds.json", "addax-no-hw"),
    map_mrr(WIKIQA_243, "cross-encoder (MiniLM), 6 x 5,095 examples", "—",
            "wikiqa/test243-long-ce-3seeds.json", "cross-encoder"),
    map_mrr(WIKIQA, "cross-encoder (MiniLM), 6 x 5,095 examples", "—", "wikiqa/long-ce-3seeds.json", "cross-encoder"),
))

PAPERS = (HCAN, IASM, MATCH_SRNN, AMVLSTM, ADDAX)


def update(text: str, tables: dict[str, str], source: str = "the file") -> str:
    """``text`` with each ``<!-- reproduction:<key>:begin -->`` ... ``end`` block replaced by its table."""
    for key, table in tables.items():
        text = replace_block(text, f"reproduction:{key}", table, source)
    return text


def main(argv: list[str] | None = None) -> None:
    """Print the tables; ``--update FILE`` rewrites their marked blocks in FILE, ``--output`` writes them."""
    tables_main(argv, __doc__.split("\n\n")[0],
                lambda: {f"reproduction:{paper.key}": render(paper) for paper in PAPERS})


if __name__ == "__main__":
    main()
