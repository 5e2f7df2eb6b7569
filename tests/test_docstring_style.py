"""The public API's docstrings share one style (Google style, as sentence-transformers writes them): a
one-line summary, then ``Args:`` naming exactly the parameters of the signature, ``Returns:`` (or
``Yields:``) when something is returned, ``Raises:`` where a caller should catch something, and
``Example:`` with a ``>>>`` snippet on the main entry points.

The public API is the explicit list :data:`PUBLIC_API` below. In a module listed with ``None`` every public
function defined there and every public method of its public classes is checked; in a module listed with
names, those functions and those classes' public methods. A class's ``__init__`` is documented in the class
docstring or its own. The examples of :data:`RUN_EXAMPLES` are run as doctests (the others need a model or
a collection, and are marked ``# doctest: +SKIP``).
"""
from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
import textwrap

import pytest

#: the public API: module -> the names checked in it (``None``: every public function and class defined there)
PUBLIC_API: dict[str, tuple[str, ...] | None] = {
    # infrastructure below the first stages and the re-rankers
    "infra.checkpoints": None,
    "infra.distributed": None,
    "infra.encoders": None,
    "infra.maxsim": None,
    # the re-ranker protocol and registry, the bases every model inherits score/fit/save/load from
    "rerankers": None,
    "rerankers.torch_base": None,
    "rerankers.neural": ("require", "check_choices", "WordReranker"),
    "rerankers.word_inputs": None,
    "rerankers.transformer_base": ("TransformerReranker",),
    "rerankers.transformer_inputs": None,
    "rerankers.precision": None,
    "rerankers.hf_export.pretrained": None,
    "rerankers.hf_export.heads": None,
    "rerankers.hf_export.classifier": ("ClassifierExport",),
    # each model's re-ranker classes
    "rerankers.hcan": ("HCANReranker",),
    "rerankers.knrm": ("KNRMReranker", "ConvKNRMReranker"),
    "rerankers.drmm": ("DRMMReranker",),
    "rerankers.matchpyramid": ("MatchPyramidReranker",),
    "rerankers.mvlstm": ("MVLSTMReranker", "AMVLSTMReranker"),
    "rerankers.iasm": ("IASMReranker", "IASMStaticReranker"),
    "rerankers.match_srnn": ("MatchSRNNReranker", "BiMatchSRNNReranker"),
    "rerankers.cross_encoder": ("CrossEncoderReranker",),
    "rerankers.bi_encoder": ("BiEncoderReranker",),
    "rerankers.addax": ("AddaxReranker",),
    # shared neural blocks and training
    "rerankers.blocks.masking": None,
    "rerankers.blocks.similarity": None,
    "rerankers.blocks.pooling": None,
    "rerankers.blocks.layers": None,
    "rerankers.blocks.recurrent": None,
    "rerankers.blocks.coattention": None,
    "rerankers.blocks.gating": None,
    "rerankers.blocks.hashing": None,
    "rerankers.blocks.stacks": None,
    "rerankers.blocks.wavefront": None,
    "rerankers.blocks.first_token": None,
    "rerankers.lru": None,
    "rerankers.wordpieces": None,
    "rerankers.embeddings": None,
    "rerankers.hf_export": None,
    "rerankers.training.data": None,
    "rerankers.training.loop": None,
    "rerankers.training.auxiliary": None,
    "rerankers.training.steps": None,
    "rerankers.training.optim": None,
    "rerankers.training.state": None,
    # the first-stage protocol, registry, options and each first stage's class and factory
    "indexes.base": None,
    "indexes.registry": None,
    "indexes.options": None,
    "indexes.lucene": ("BM25Retriever", "bm25_first_stage", "bm25_rm3_first_stage", "existing_index_first_stage"),
    "indexes.lucene_build": ("build_index",),
    "indexes.bm25s": ("Bm25sRetriever", "bm25s_first_stage"),
    "indexes.dense": ("DenseRetriever", "dense_first_stage"),
    "indexes.hybrid": ("HybridRetriever", "hybrid_first_stage"),
    "indexes.dense_encoder": None,
    "indexes.jvm": None,
    "indexes.shards": None,
    "indexes.lucene_check": None,
    # the notebook API, the PyTerrier API, records, errors, evaluation, datasets and evaluation protocols
    "pipeline.api": None,
    "pipeline.pyterrier": ("reranker", "first_stage", "text_loader", "topics", "qrels"),
    "pipeline.core.records": None,
    "pipeline.core.errors": None,
    "pipeline.core.plugins": None,
    "pipeline.core.runtime": None,
    "pipeline.core.home": None,
    "pipeline.core.vocabulary": None,
    "pipeline.core.docstore": None,
    "pipeline.core.atomic": None,
    "pipeline.core.progress": None,
    "pipeline.core.evaluation": None,
    "pipeline.core.significance": None,
    "pipeline.core.run_names": None,
    "pipeline.core.measures": None,
    "pipeline.core.datasets.registry": None,
    "pipeline.core.datasets.dataset": None,
    "pipeline.core.datasets.local": None,
    "pipeline.core.datasets.irds": None,
    "pipeline.core.datasets.trec_format": None,
    "pipeline.core.datasets.pair_format": None,
    "pipeline.core.formats.runs": None,
    "pipeline.core.formats.qrels": None,
    "pipeline.core.formats.topics": None,
    "pipeline.core.formats.docs": None,
    "pipeline.engine.protocols": None,
    "pipeline.engine.config": ("RunConfig",),
}

#: the main entry points: each shows a short ``>>>`` example
ENTRY_POINTS = (
    "infra.maxsim.maxsim", "infra.checkpoints.save_checkpoint", "infra.encoders.load_encoder",
    "rerankers.register", "rerankers.reranker_class", "rerankers.available",
    "rerankers.torch_base.TorchReranker.from_options", "rerankers.torch_base.TorchReranker.score",
    "rerankers.neural.WordReranker.load", "rerankers.transformer_base.TransformerReranker.load",
    "rerankers.cross_encoder.CrossEncoderReranker.load", "rerankers.bi_encoder.BiEncoderReranker.load",
    "indexes.registry.register", "indexes.registry.make_first_stage", "indexes.registry.available",
    "indexes.lucene_build.build_index", "pipeline.api.Reranker.load", "pipeline.api.Reranker.score",
    "pipeline.api.Reranker.rank", "pipeline.api.load_model", "pipeline.pyterrier.reranker",
    "pipeline.core.evaluation.evaluate", "pipeline.core.evaluation.compare",
    "pipeline.core.datasets.registry.load_dataset",
    "pipeline.core.datasets.registry.register_dataset", "pipeline.core.formats.runs.read_run",
    "pipeline.core.formats.topics.read_topics", "pipeline.core.formats.docs.read_docs",
    "rerankers.hf_export.load_pretrained",
)

#: entry points whose examples are cheap enough to run here (no model, no collection)
RUN_EXAMPLES = (
    "infra.maxsim.maxsim", "infra.checkpoints.save_checkpoint", "infra.encoders.resolve_encoder",
    "rerankers.available", "rerankers.reranker_class", "rerankers.training.optim.learning_rate_factor",
    "indexes.registry.available", "indexes.registry.first_stage_options", "indexes.options.option_names",
    "indexes.base.Retriever.search", "indexes.base.RunRetriever.search", "rerankers.blocks.wavefront.active_slots",
    "rerankers.blocks.first_token.first_token_states",
    "rerankers.wordpieces.pad_ids", "rerankers.wordpieces.unique_rows", "rerankers.lru.LRUCache.__init__",
    "pipeline.api.as_docs", "pipeline.core.records.ranked", "pipeline.core.records.minmax",
    "pipeline.core.errors.DataFormatError.__init__", "pipeline.core.evaluation.evaluate",
    "pipeline.core.significance.correct_pvalues", "pipeline.core.run_names.run_name",
    "pipeline.core.run_names.run_labels",
    "pipeline.core.measures.parse_measures", "pipeline.core.measures.canonical_measures",
    "pipeline.core.measures.split_measure_name", "pipeline.engine.protocols.hold_out",
    "pipeline.core.formats.runs.natural_key", "pipeline.core.formats.runs.write_run",
    "rerankers.embeddings.oov_bounds", "pipeline.core.datasets.pair_format.wikiqa_split_name",
    "pipeline.core.plugins.Registry.__init__", "pipeline.core.runtime.resolve_device",
    "pipeline.core.runtime.requested_precision", "pipeline.core.runtime.resolve_precision",
    "indexes.shards.chunks", "pipeline.core.vocabulary.tokenize", "pipeline.core.vocabulary.Vocabulary.build",
    "pipeline.core.vocabulary.ngrams", "pipeline.core.atomic.atomic_write", "pipeline.core.progress.progress_switch",
)

SECTION = re.compile(r"^(?P<indent>[ \t]*)(?P<name>Args|Arguments|Returns|Yields|Raises|Example|Examples|"
                     r"Attributes|Note|Notes):[ \t]*$")
ENTRY = re.compile(r"^(?P<name>\*{0,2}[A-Za-z_][A-Za-z0-9_]*)[ \t]*(?:\([^)]*\))?:(?:\s|$)")


def sections(doc: str) -> dict[str, list[str]]:
    """The Google-style sections of ``doc``.

    Args:
        doc: a docstring.

    Returns:
        Section title -> the lines of its body, dedented.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    found: dict[str, list[str]] = {}
    index = 0
    while index < len(lines):
        match = SECTION.match(lines[index])
        index += 1
        if not match:
            continue
        indent = len(match["indent"])
        body = []
        while index < len(lines) and (not lines[index].strip()
                                      or len(lines[index]) - len(lines[index].lstrip()) > indent):
            body.append(lines[index])
            index += 1
        found.setdefault(match["name"], []).extend(textwrap.dedent("\n".join(body)).strip("\n").splitlines())
    return found


def documented_args(body: list[str]) -> list[str]:
    """The parameter names an ``Args:`` body documents (its lines at the outer indent).

    Args:
        body: the dedented lines of the section.

    Returns:
        The names, ``*args`` and ``**kwargs`` with their stars stripped.
    """
    names = []
    for line in body:
        if line and not line[0].isspace():
            match = ENTRY.match(line)
            assert match, f"an Args: entry reads 'name: description', got {line!r}"
            names.append(match["name"].lstrip("*"))
    return names


def returns_value(function) -> bool:
    """Whether ``function`` gives its caller a value.

    Args:
        function: a plain function.

    Returns:
        From the return annotation when there is one, else from a ``return <value>`` or ``yield`` in its body
        (nested functions left out).
    """
    annotation = inspect.signature(function).return_annotation
    if annotation is not inspect.Signature.empty:
        return annotation not in (None, "None", type(None), "NoReturn", "typing.NoReturn")
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0]
    nested = {id(node) for child in ast.walk(body) if child is not body
              and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
              for node in ast.walk(child)}
    # a bare ``yield`` (a context manager's) gives nothing; ``yield value`` and ``return value`` do
    return any(id(node) not in nested and (isinstance(node, ast.YieldFrom) or (
               isinstance(node, (ast.Return, ast.Yield)) and node.value is not None
               and not (isinstance(node.value, ast.Constant) and node.value.value is None)))
               for node in ast.walk(body))


def parameters(function, method: bool = False) -> list[str]:
    """The parameters a docstring documents.

    Args:
        function: a plain function.
        method: ``function`` is a method or class method: its first parameter (``self``, ``cls``) is left out.

    Returns:
        Their names in signature order.
    """
    names = list(inspect.signature(function).parameters)
    return names[1:] if method else names


def public_callables() -> list[tuple[str, object, str, bool]]:
    """Every public function and method of :data:`PUBLIC_API`, with the docstring that documents it.

    Returns:
        ``(qualified name, function, docstring, method)`` tuples; ``method`` is False for functions and static
        methods, whose first parameter is documented too.
    """
    found = []
    for module_name, names in PUBLIC_API.items():
        module = importlib.import_module(module_name)
        if names is None:
            names = sorted(name for name, value in vars(module).items() if not name.startswith("_")
                           and (inspect.isfunction(value) or inspect.isclass(value))
                           and value.__module__ == module_name)
        for name in names:
            value = getattr(module, name)
            if inspect.isfunction(value):
                found.append((f"{module_name}.{name}", value, value.__doc__ or "", False))
                continue
            assert inspect.isclass(value), f"{module_name}.{name} is neither a function nor a class"
            for attribute, member in sorted(vars(value).items()):
                method = not isinstance(member, staticmethod)
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                # only methods written in this class: not a dataclass's generated __init__, not an alias of
                # a function from elsewhere (documented there), not typing.Protocol's __init__
                if not inspect.isfunction(member) or member.__module__ != module_name \
                        or not member.__qualname__.startswith(f"{value.__qualname__}.") \
                        or member.__code__.co_filename.startswith("<"):
                    continue
                if attribute == "__init__":
                    doc = "\n\n".join(inspect.cleandoc(d) for d in (value.__doc__, member.__doc__) if d)
                elif attribute.startswith("_"):
                    continue
                else:
                    doc = member.__doc__ or ""
                found.append((f"{module_name}.{name}.{attribute}", member, doc, method))
    return found


CALLABLES = public_callables()
DOCS = {qualified: doc for qualified, _, doc, _ in CALLABLES}


def test_the_public_api_is_found():
    assert len(CALLABLES) > 200, f"only {len(CALLABLES)} public callables found: is PUBLIC_API right?"
    for entry in ENTRY_POINTS + RUN_EXAMPLES:
        assert entry in DOCS, f"{entry} is not among the public callables"
    with_params = sum(1 for _, function, _, method in CALLABLES if parameters(function, method))
    assert with_params > 150, "the Args: check must cover functions with parameters"


def test_the_checks_catch_a_bad_docstring():
    def scale(values: list, factor: float = 2.0) -> list:
        """Every value times ``factor``.

        Args:
            values: numbers.
            factors: the multiplier.
        """
        return [v * factor for v in values]

    found = sections(scale.__doc__)
    assert documented_args(found["Args"]) == ["values", "factors"] != parameters(scale)
    assert returns_value(scale) and "Returns" not in found


@pytest.mark.parametrize("qualified,function,doc,method", CALLABLES, ids=[c[0] for c in CALLABLES])
def test_docstring_style(qualified, function, doc, method):
    assert doc.strip(), f"{qualified} has no docstring"
    found = sections(doc)
    params = parameters(function, method)
    if params:
        assert "Args" in found, f"{qualified}{inspect.signature(function)} takes parameters: add an Args: section"
        documented = documented_args(found["Args"])
        assert sorted(documented) == sorted(params), \
            f"{qualified}: Args: documents {documented}, the signature has {params}"
    else:
        assert "Args" not in found, f"{qualified} takes no parameters but documents Args:"
    if returns_value(function) and function.__name__ != "__init__":
        assert "Returns" in found or "Yields" in found, f"{qualified} returns a value: add a Returns: section"
    assert not SECTION.match(inspect.cleandoc(doc).splitlines()[0]), f"{qualified}: open with a summary line"


@pytest.mark.parametrize("qualified", ENTRY_POINTS)
def test_entry_points_show_an_example(qualified):
    found = sections(DOCS[qualified])
    example = found.get("Example", []) + found.get("Examples", [])
    assert any(line.lstrip().startswith(">>>") for line in example), \
        f"{qualified}: add an Example: section with a >>> snippet"


@pytest.mark.parametrize("qualified", RUN_EXAMPLES)
def test_cheap_examples_run(qualified, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    monkeypatch.delenv("PIPELINE_PRECISION", raising=False)  # a host-wide precision would change what auto means
    function = next(f for name, f, _, _ in CALLABLES if name == qualified)
    module = importlib.import_module(function.__module__)
    test = doctest.DocTestParser().get_doctest(DOCS[qualified], dict(vars(module)), qualified, None, 0)
    assert test.examples, f"{qualified}: no >>> example found"
    assert not any(example.options.get(doctest.SKIP) for example in test.examples), \
        f"{qualified}: an example listed to run is marked +SKIP"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"{qualified}: its example does not give what it shows (see the output above)"
