"""The import graph of the project's packages: layers and no circles.

Layers, bottom to top:

1. ``pipeline.core``: records, errors, atomic writes, TREC and text I/O, datasets, evaluation, options and
   runtime settings. Imports nothing else of the project.
2. ``infra``: neural infrastructure both of the next layer use (pre-trained encoders, checkpoints,
   data-parallel work, MaxSim). Imports only ``pipeline.core``.
3. ``rerankers`` (models, their shared blocks and the training loop they fit with) and ``indexes`` (first
   stages), side by side: each imports only ``pipeline.core`` and ``infra``, never the other.
4. The experiment engine, ``pipeline.engine``: config, plan, protocols, model cache, stages, fusion, obtain.
   Imports the layers below, never a command.
5. The commands: every other ``pipeline`` module (``run``, ``train``, ``serve`` ..., the command shell, the
   Python API, the PyTerrier integration).

Every import counts, also one written inside a function (lazy imports keep heavy libraries out of start-up,
but never break a circle).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import write_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "infra", "indexes", "rerankers")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (a module, or the module defining an imported name)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from package import submodule`` imports the submodule; ``from module import name`` the module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = resolve(target, modules)
            if resolved is not None and resolved != name:
                found.add(resolved)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def layer(module: str) -> int:
    if module == "pipeline" or module.startswith("pipeline.core"):
        return 0
    if module.startswith("infra"):
        return 1
    if module.startswith(("rerankers", "indexes")):
        return 2
    if module.startswith("pipeline.engine"):
        return 3
    return 4


def package(module: str) -> str:
    return module.partition(".")[0]


def test_each_layer_imports_only_the_layers_below_it(graph):
    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if layer(target) > layer(source))
    assert upward == []


def test_the_engine_sits_between_the_models_and_the_commands(graph):
    # an engine module importing a command (or a first stage importing the engine) is an upward edge above
    assert layer("pipeline.core.records") < layer("infra.encoders") < layer("indexes.lucene") \
        == layer("rerankers.knrm") < layer("pipeline.engine.plan") < layer("pipeline.run")
    assert layer("pipeline.engine") == layer("pipeline.engine.obtain") < layer("pipeline.serve.models") \
        == layer("pipeline.shell") == layer("pipeline.api")
    # the engine is a package of its own: no engine module left beside the commands
    engine = {name for name in graph if name.startswith("pipeline.engine.")}
    assert {"pipeline.engine.config", "pipeline.engine.plan", "pipeline.engine.obtain"} <= engine
    assert not {"pipeline.config", "pipeline.plan", "pipeline.obtain", "pipeline.model_cache"} & set(graph)


def test_first_stages_and_re_rankers_do_not_import_each_other(graph):
    # what both need (encoders, checkpoints, distributed work, MaxSim) lives in infra, below both
    sideways = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                      if layer(source) == layer(target) == 2 and package(source) != package(target))
    assert sideways == []


def test_the_runtime_settings_are_a_leaf(graph):
    assert graph["pipeline.core.runtime"] == set()


def test_no_import_circles(graph):
    cycles = []
    state: dict[str, int] = {}                       # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert cycles == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path):
    # the checker itself, on a made-up package: a function-level import and a relative one are edges
    package = write_files(tmp_path / "pkg", {"__init__.py": "", "low.py": "VALUE = 1\n",
                                             "high.py": "from .low import VALUE\n\ndef later():\n    import pkg.other\n",
                                             "other.py": ""})
    modules = {"pkg": package / "__init__.py", "pkg.low": package / "low.py", "pkg.high": package / "high.py",
               "pkg.other": package / "other.py"}
    assert imports_of("pkg.high", modules["pkg.high"], modules) == {"pkg.low", "pkg.other"}


#: the modules that get a re-ranker model: :func:`pipeline.engine.obtain.obtain_model` and the model cache it reads;
#: ``pipeline.train`` trains the cache's models (``fold_models(load_cached=False)``) and hands none out
MODEL_SOURCES = {"pipeline.engine.obtain", "pipeline.engine.model_cache", "pipeline.train"}
#: what a ``.load(...)`` call may be on outside them: loaders of files and plugins, not of models
NOT_MODELS = {"torch", "json", "yaml", "pickle", "ir_datasets", "point", "DATASET_PLUGINS"}
#: the model cache's own ways in: a command calling one obtains a model around obtain_model
CACHE_CALLS = {"trained_reranker", "fold_models", "obtain_reranker", "train_fold"}


def model_acquisitions(name: str, path: Path) -> list[str]:
    """Where module ``name`` loads or trains a re-ranker itself: a call of the model cache's functions, or a
    ``.load(...)`` on anything but a file or plugin loader."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called in CACHE_CALLS:
            found.append(f"{name}:{node.lineno} {called}()")
        elif called == "load" and isinstance(func, ast.Attribute):
            receiver = func.value
            base = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", None)
            if base not in NOT_MODELS:
                found.append(f"{name}:{node.lineno} {ast.unparse(func)}()")
    return found


def test_obtain_model_is_the_only_way_the_commands_get_a_model():
    modules = project_modules()
    offenders = [where for name, path in modules.items()
                 if name.startswith("pipeline") and not name.startswith("pipeline.core") and name not in MODEL_SOURCES
                 for where in model_acquisitions(name, path)]
    assert offenders == []
    # run, serve, classify, export, pyterrier and the Python API all go through it
    users = {name for name, path in modules.items() if "obtain_model(" in path.read_text(encoding="utf-8")}
    assert {"pipeline.run", "pipeline.serve.models", "pipeline.classify", "pipeline.export", "pipeline.pyterrier",
            "pipeline.api"} <= users


def test_the_model_check_sees_a_command_loading_its_own_model(tmp_path):
    # the checker itself: the way run.py loaded --model before obtain_model, and a model-cache call
    source = tmp_path / "command.py"
    source.write_text("def work(plan, config):\n    model = plan.reranker_class.load(config.model)\n"
                      "    other = trained_reranker(plan.training, None)\n    data = json.load(open('x'))\n")
    assert model_acquisitions("command", source) == ["command:2 plan.reranker_class.load()",
                                                     "command:3 trained_reranker()"]
