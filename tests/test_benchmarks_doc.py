"""BENCHMARKS.md is a reference: its tables are what the scripts render from the result files it names.

Fast and data-free: the renderers read only ``benchmarks/results`` (JSON and Markdown kept in the repository).
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "BENCHMARKS.md"


def load_script(name: str):
    """``benchmarks/<name>.py`` imported from its file and registered in ``sys.modules`` (its dataclasses look
    their module up there; ``helpers.load_benchmark`` does not register)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


effectiveness = load_script("effectiveness")
reproductions = load_script("reproductions")


def text() -> str:
    return DOC.read_text(encoding="utf-8")


def between(doc: str, begin: str, end: str) -> str:
    """What lies between two markers, which must each occur exactly once."""
    assert doc.count(begin) == 1, f"{begin} must occur once in BENCHMARKS.md"
    assert doc.count(end) == 1, f"{end} must occur once in BENCHMARKS.md"
    return doc.split(begin, 1)[1].split(end, 1)[0]


def test_every_result_file_it_names_exists():
    # "<year>" and "seedN" / "-B.md" stand for a family of files named in the text around them; a "*" is a
    # glob that must match at least one file
    paths = set(re.findall(r"benchmarks/results/[A-Za-z0-9_./@*<>-]+", text()))
    assert len(paths) > 50
    missing = []
    for path in sorted(p.rstrip(".") for p in paths):
        if "<" in path or re.search(r"seedN|-B\.md", path):
            continue
        found = list(ROOT.glob(path)) if "*" in path else [ROOT / path] if (ROOT / path).exists() else []
        if not found:
            missing.append(path)
    assert missing == []


def test_the_first_section_is_the_current_results():
    headings = re.findall(r"^## (.+)$", text(), flags=re.M)
    assert headings[0].startswith("Current results")
    assert headings[1:] == ["First stage", "HCAN (Rao et al., EMNLP 2019)", "IASM (Zhao et al., ICDM 2020)",
                            "Match-SRNN (Wan et al., IJCAI 2016)", "MV-LSTM / aMV-LSTM (Belkacem et al., SAC 2019)",
                            "ADDAX (Li, Li and Guo, COLING 2022)", "Learned token-code first stages", "Speed",
                            "Baselines and other models", "Pair classification (WikiQA, TrecQA)"]


def test_no_heading_names_an_issue_or_a_session():
    headings = re.findall(r"^#+ .*$", text(), flags=re.M)
    offending = [h for h in headings if re.search(r"\bissues?\b|\bsessions?\b", h, flags=re.I)]
    assert offending == []


def test_the_reproduction_tables_are_what_the_script_renders():
    doc = text()
    for paper in reproductions.PAPERS:
        begin, end = f"<!-- reproduction:{paper.key}:begin -->", f"<!-- reproduction:{paper.key}:end -->"
        assert between(doc, begin, end) == "\n" + reproductions.render(paper), paper.key
    tables = {paper.key: reproductions.render(paper) for paper in reproductions.PAPERS}
    assert reproductions.update(doc, tables) == doc


def test_each_paper_section_opens_with_its_reproduction_table():
    doc = text()
    for heading, key in (("HCAN", "hcan"), ("IASM", "iasm"), ("Match-SRNN", "match-srnn"),
                         ("MV-LSTM / aMV-LSTM", "amvlstm"), ("ADDAX", "addax")):
        section = re.search(rf"^## {re.escape(heading)} \(.*?\)\n\n(.*?)\n", doc, flags=re.M)
        assert section is not None, heading
        assert section.group(1) == f"<!-- reproduction:{key}:begin -->"


def test_the_effectiveness_blocks_are_what_effectiveness_py_renders():
    doc = text()
    assert between(doc, "<!-- effectiveness:begin -->", "<!-- effectiveness:end -->") == \
        "\n" + effectiveness.render(effectiveness.COLLECTIONS)
    assert between(doc, "<!-- dl:begin -->", "<!-- dl:end -->") == "\n" + effectiveness.render_dl()


def test_update_rewrites_a_stale_block_and_refuses_a_missing_one(tmp_path):
    paper = reproductions.PAPERS[0]
    stale = (f"before\n<!-- reproduction:{paper.key}:begin -->\nold table\n"
             f"<!-- reproduction:{paper.key}:end -->\nafter\n")
    fresh = reproductions.update(stale, {paper.key: reproductions.render(paper)})
    assert "old table" not in fresh and fresh.startswith("before\n") and fresh.endswith("after\n")
    assert reproductions.render(paper) in fresh
    with pytest.raises(SystemExit, match="no <!-- reproduction:hcan:begin -->"):
        reproductions.update("no markers here\n", {paper.key: reproductions.render(paper)})


def test_every_measured_cell_reads_its_result_file():
    # each Measured source names an existing JSON row and metric; each Copied one a line of its origin
    for paper in reproductions.PAPERS:
        for row in paper.rows:
            for source in row.ours:
                if isinstance(source, reproductions.Measured):
                    assert source.text()
                elif source.origin.startswith("BENCHMARKS.md@"):
                    assert source.line > 0
                else:
                    lines = (ROOT / "benchmarks" / "results" / source.origin).read_text(encoding="utf-8").split("\n")
                    assert source.value in lines[source.line - 1], (source.origin, source.line, source.value)


def test_the_results_folder_holds_no_flat_files_and_every_named_result_exists():
    # results live in benchmarks/results/<dataset or topic>/<experiment>.<ext>; fidelity.json is the one
    # file kept on top (its path is required). Every benchmarks/results/... path named in BENCHMARKS.md,
    # README.md, docs/*.md and benchmarks/*.py exists, except a family written with "<...>", "{...}" (built in code),
    # "seedN" or "-B.md"; a "*" is a glob that must match at least one file, a path without a suffix a stem
    # (a script's --output) that must name at least one file.
    results = ROOT / "benchmarks" / "results"
    assert {p.name for p in results.iterdir() if not p.is_dir()} <= {"fidelity.json"}
    sources = [ROOT / "BENCHMARKS.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
               *sorted((ROOT / "benchmarks").glob("*.py"))]
    missing, flat = [], []
    for source in sources:
        named = re.findall(r"benchmarks/results/[A-Za-z0-9_./@*<>{}-]+", source.read_text(encoding="utf-8"))
        for path in sorted({p.rstrip(".") for p in named}):
            if re.search(r"[<>{}]|seedN|-B\.md", path):
                continue
            found = list(ROOT.glob(path)) if "*" in path else [ROOT / path] if (ROOT / path).exists() else []
            if not found and not Path(path).suffix:  # a stem (--output): the files written as stem.json/.md
                found = list(ROOT.glob(path + ".*"))
            if not found:
                missing.append(f"{source.relative_to(ROOT)}: {path}")
            if len(Path(path).parts) == 3 and not (ROOT / path).is_dir() and path != "benchmarks/results/fidelity.json":
                flat.append(f"{source.relative_to(ROOT)}: {path}")
    assert flat == []
    assert missing == []


def test_the_file_opens_with_the_matrix_matrix_py_renders():
    matrix = load_script("matrix")
    doc = text()
    assert doc.startswith("# Benchmarks\n\n<!-- matrix:begin -->\n")
    assert between(doc, "<!-- matrix:begin -->", "<!-- matrix:end -->") == "\n" + matrix.render(), \
        "run python benchmarks/matrix.py --update BENCHMARKS.md"


def test_each_matrix_cell_read_from_a_markdown_table_agrees_with_the_table_s_own_mean():
    # the Markdown sources are parsed from their per-seed column: the mean they print beside it must match
    matrix = load_script("matrix")
    checked = 0
    for _, _, cells in matrix.ROWS:
        for key, source in cells.items():
            if source.file.endswith(".json"):
                continue
            metric = next(c.metric for c in matrix.COLUMNS if c.key == key)
            lines = (matrix.RESULTS / source.file).read_text(encoding="utf-8").splitlines()
            header = [c.strip() for c in next(line for line in lines if line.startswith("|")).strip("|").split("|")]
            row = next(line for line in lines if re.match(rf"\| {re.escape(source.row)}( \(\d+ seeds?\))? \|", line))
            stated = float(row.strip("|").split("|")[header.index(metric)].split("±")[0])
            values = source.values(metric)
            assert abs(sum(values) / len(values) - stated) < 1e-4, (source, metric)
            checked += 1
    assert checked >= 10


def test_fidelity_json_and_its_table_are_what_fidelity_py_builds():
    fidelity = load_script("fidelity")
    record = fidelity.build()
    assert set(record) >= {"hcan_alone_mb2013_map", "hcan_alone_mb2014_map", "iasm_titles_p1", "drmm_titles_p1"}
    assert all(len(entry["per_seed"]) >= 3 for entry in record.values())
    stored = json.loads((ROOT / "benchmarks" / "results" / "fidelity.json").read_text())
    assert stored == record, "run python benchmarks/fidelity.py --update BENCHMARKS.md"
    assert between(text(), fidelity.BEGIN, fidelity.END) == "\n" + fidelity.render(record)
