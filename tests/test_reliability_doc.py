"""RELIABILITY.md names a test for every probe: each must exist, so the table cannot rot silently."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_named_in_reliability_md_exists():
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    # a test, or one case of a parametrized test: test_name[case id], the id written in the test's file
    named = set(re.findall(r"`(tests/(?:\w+/)*test_\w+\.py)::(test_\w+)(?:\[(\w+)\])?`", text))
    assert len(named) >= 40
    defined: dict[str, set[str]] = {}
    for file in {file for file, _, _ in named}:
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        defined[file] = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = sorted(f"{file}::{name}[{case}]" for file, name, case in named
                     if name not in defined[file] or case and f'"{case}"' not in (ROOT / file).read_text())
    assert missing == []


def test_the_probe_count_matches_the_table():
    text = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \|", text, flags=re.M)
    assert [int(r) for r in rows] == list(range(1, len(rows) + 1))
    assert f"**{len(rows)} probes, 0 silent wrong results**" in text
