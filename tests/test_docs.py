"""The documentation stays true: the generated command-line reference is current, README stays short, every
link between pages resolves, and every cross-reference to the project's code (a dotted name such as
``pipeline.core.errors.CheckpointError`` in docs, a ``:class:`...``` in a docstring) names something that
exists."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "indexes", "rerankers")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "BENCHMARKS.md",
         ROOT / "RELIABILITY.md", ROOT / "SCALING.md"]
SOURCES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))

#: a Markdown link to a local file: [text](path) or [text](path#anchor), not a URL
LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)(?:#[^)]*)?\)")
#: a backticked dotted name of the project: `pipeline.core.errors.CheckpointError`, `rerankers.hcan`
DOTTED = re.compile(r"`((?:pipeline|indexes|rerankers)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
#: a Sphinx role in a docstring: :class:`~pipeline.x.Y`, :func:`indexes.codes.build_code_index`
ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?((?:pipeline|indexes|rerankers)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")


def resolves(dotted: str) -> bool:
    """True when ``dotted`` names a module, or an attribute (at any depth) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                annotations = getattr(target, "__annotations__", {}) or {}
                fields = getattr(target, "__dataclass_fields__", {}) or {}
                return name in annotations or name in fields  # a field of a (data)class, named in docs
            target = getattr(target, name)
        return True
    return False


def test_the_command_line_reference_is_current():
    from pipeline.engine.cli_reference import render

    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == render(), \
        "docs/cli.md is stale: python -m pipeline.engine.cli_reference --update docs/cli.md"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 200, f"README.md has {lines} lines; move the detail to a page under docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_local_link_resolves(page):
    broken = [target for target in LINK.findall(page.read_text(encoding="utf-8"))
              if not (page.parent / target).exists()]
    assert not broken, f"{page.name}: links to missing files {broken}"


def test_every_dotted_name_in_the_docs_exists():
    stale = sorted({(page.relative_to(ROOT).as_posix(), name) for page in PAGES
                    for name in DOTTED.findall(page.read_text(encoding="utf-8")) if not resolves(name)})
    assert not stale, f"names in the docs that no longer exist: {stale}"


def test_every_cross_reference_in_docstrings_exists():
    stale = sorted({(source.relative_to(ROOT).as_posix(), name) for source in SOURCES
                    for name in ROLE.findall(source.read_text(encoding="utf-8")) if not resolves(name)})
    assert not stale, f"docstring references to names that no longer exist: {stale}"
