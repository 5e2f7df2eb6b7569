"""The documentation stays true: the generated command-line reference is current, README stays short, every
link between pages resolves, and every cross-reference to the project's code (a dotted name such as
``pipeline.core.errors.CheckpointError`` in docs, a ``:class:`...``` in a docstring) names something that
exists."""
from __future__ import annotations

import ast
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


#: the packages whose docstrings are read as their modules see them (``infra`` included)
DOCSTRING_PACKAGES = ("pipeline", "indexes", "rerankers", "infra")
#: any role's target, qualified or not: :class:`~pipeline.x.Y`, :meth:`save`, :mod:`.encoders`
ANY_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`~?([.A-Za-z_][A-Za-z0-9_.]*)`")
#: a double-backticked dotted name of the project in a docstring: ``pipeline.engine.stages.rerank``
CODE_NAME = re.compile(r"``((?:pipeline|indexes|rerankers|infra)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?``")
#: (module, text) pairs that show the markup itself rather than refer to something
NOT_REFERENCES = {("pipeline.engine.cli_options", "a.B")}


def _attribute_path(target, names: list[str]) -> bool:
    """Whether ``names`` lead from ``target`` to an attribute (or a declared field of a (data)class)."""
    for name in names:
        if not hasattr(target, name):
            annotations = getattr(target, "__annotations__", {}) or {}
            fields = getattr(target, "__dataclass_fields__", {}) or {}
            return name in annotations or name in fields
        target = getattr(target, name)
    return True


def resolves_in(name: str, module, cls=None, instance_attributes: frozenset = frozenset()) -> bool:
    """True when ``name``, as a docstring of ``module`` (inside class ``cls``) writes it, names something.

    A name resolves as Sphinx would look it up: relative (``.encoders``) to the module's package, then in
    the enclosing class (``save``, or an attribute its methods set on ``self``), the builtins, the module's
    own namespace (``Dataset.subset``) and last as an importable dotted path (``pipeline.core.records.Doc``).
    """
    import builtins

    if name.startswith("."):
        package = module.__name__ if module.__file__.endswith("__init__.py") else module.__name__.rpartition(".")[0]
        name = package + name
    parts = name.split(".")
    if len(parts) == 1 and parts[0] in instance_attributes:
        return True
    for scope in (cls, builtins, module):
        if scope is not None and hasattr(scope, parts[0]) and _attribute_path(scope, parts):
            return True
    return resolves(name)


def _docstrings(path: Path, module):
    """``(class or None, its instance attributes, docstring)`` of the module, of every class and of every
    function in ``path``."""
    def visit(node, cls, attributes):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                yield cls, attributes, doc
        for child in ast.iter_child_nodes(node):
            inner, inner_attributes = cls, attributes
            if isinstance(child, ast.ClassDef):
                inner = getattr(cls if cls is not None else module, child.name, None)
                inner_attributes = frozenset(
                    target.attr for target in ast.walk(child) if isinstance(target, ast.Attribute)
                    and isinstance(target.ctx, ast.Store) and isinstance(target.value, ast.Name)
                    and target.value.id == "self")
            yield from visit(child, inner, inner_attributes)

    yield from visit(ast.parse(path.read_text(encoding="utf-8")), None, frozenset())


def test_every_cross_reference_in_a_docstring_resolves_where_it_is_written():
    checked, stale = 0, []
    for package in DOCSTRING_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if parts[-1] == "__main__":
                continue  # running it is what importing it does
            module = importlib.import_module(name)
            for cls, attributes, doc in _docstrings(path, module):
                for target in ANY_ROLE.findall(doc) + CODE_NAME.findall(doc):
                    checked += 1
                    if (name, target) not in NOT_REFERENCES and not resolves_in(target, module, cls, attributes):
                        stale.append(f"{path.relative_to(ROOT).as_posix()}: {target}")
    assert checked > 500, f"only {checked} cross-references found: is the pattern right?"
    assert not stale, f"docstring cross-references that name nothing: {sorted(set(stale))}"
