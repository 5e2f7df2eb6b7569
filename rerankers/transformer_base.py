"""The base of the transformer re-rankers (ADDAX, the cross-encoder).

A model file subclasses :class:`TransformerReranker` and writes only what is specific to it: its config
dataclass (``model_config_class``), ``build_module(encoder)`` returning a torch module around a fresh
pre-trained encoder (:func:`rerankers.encoders.load_encoder`), ``encode(pairs)`` (a batch of tensors) and,
if scoring is more than ``module(**tensors)``, ``forward(batch)``.

This class does the rest, the same way for both models, and offers what :class:`rerankers.training.loop.Trainer`
expects of a trainable re-ranker (``module``, ``prepare``, ``encode``, ``forward``, ``pair_length``):

* Tokenization with the encoder's own tokenizer (word-piece ids, no special tokens), truncated to
  ``max_query_length`` / ``max_doc_length`` and cached per query text and per document (bounded LRU).
  ``prepare(train, dataset)`` therefore needs no vocabulary of the collection; it only loads the encoder
  and builds a fresh module (seeded: the same seed gives the same heads, so the same scores).
* Special tokens are added from templates probed once from the tokenizer (``[CLS] a [SEP]``,
  ``[CLS] a [SEP] b [SEP]`` for BERT, ``<s> a </s></s> b </s>`` for RoBERTa), so any Hugging Face encoder
  name or local directory works.
* Training with the project's :class:`~rerankers.training.loop.Trainer`, through a subclass whose ``loss`` adds
  the re-ranker's :meth:`TransformerReranker.auxiliary_loss` (``None`` by default): a model with extra
  training objectives (ADDAX's hashing losses, eq. 15) stores them during ``forward`` and returns them
  there, and the Trainer itself stays generic.
* Self-describing checkpoints written atomically: re-ranker name and class, the three configs, the
  encoder's name, its architecture and a fingerprint of its tokenizer's vocabulary, library versions and
  the whole ``state_dict`` (fine-tuned encoder included). Anything that does not match is a
  :class:`~pipeline.core.errors.CheckpointError` naming the file.

Training defaults suit fine-tuning a pre-trained encoder (a small learning rate, gradient clipping at
1.0), a constant learning rate unless ``schedule``/``warmup`` are set (:class:`~rerankers.training.config.TrainConfig`);
``head_learning_rate`` gives the layers around the encoder (parameters outside ``encoder.``) their own step.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Hashable, Mapping, Sequence

from pipeline.core.errors import CheckpointError, PipelineError
from pipeline.core.options import apply_overrides
from pipeline.core.records import Doc, Query

from .checkpoints import load_checkpoint, project_version, save_checkpoint
from .encoders import DEFAULT_ENCODER, load_encoder
from .lru import LRUCache
from .neural import TorchReranker
from .training.config import TrainConfig
from .training.loop import Trainer

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
CHECKPOINT_KIND = "transformer"
#: encoder-config fields that must agree between a checkpoint and the encoder it is rebuilt on
_ARCHITECTURE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "vocab_size", "max_position_embeddings", "type_vocab_size")


@dataclass
class EncoderConfig:
    """The encoder and how texts become its inputs (each can be set with ``--set name=value``).

    Attributes:
        encoder: a Hugging Face model name or a local directory (default: the packaged MiniLM).
        max_query_length: word pieces kept of a query (special tokens not counted).
        max_doc_length: word pieces kept of a document (special tokens not counted).
        doc_cache_size: documents whose encoder output a re-ranker that caches (ADDAX) keeps (LRU; 0: none).
    """

    encoder: str = DEFAULT_ENCODER
    max_query_length: int = 32
    max_doc_length: int = 180
    doc_cache_size: int = 4096

    def __post_init__(self):
        if self.max_query_length < 1 or self.max_doc_length < 1:
            raise PipelineError("max_query_length and max_doc_length must be at least 1")
        if self.doc_cache_size < 0:
            raise PipelineError("doc_cache_size must be >= 0 (0 disables the cache)")


def _find(sequence: list[int], part: list[int], start: int = 0) -> int:
    for index in range(start, len(sequence) - len(part) + 1):
        if sequence[index : index + len(part)] == part:
            return index
    raise PipelineError(f"tokenizer: cannot locate {part} in its own output {sequence}")


class SpecialTokens:
    """Where a tokenizer puts its special tokens around one text and around a pair of texts.

    Probed once from the tokenizer's own output for the texts ``"a"`` and ``"b"`` (transformers 5 no longer
    offers ``build_inputs_with_special_tokens``), so ids cached without special tokens can be wrapped
    without tokenizing again.
    """

    def __init__(self, tokenizer):
        a = tokenizer("a", add_special_tokens=False)["input_ids"]
        b = tokenizer("b", add_special_tokens=False)["input_ids"]
        single = tokenizer("a")["input_ids"]
        at = _find(single, a)
        self.single_prefix, self.single_suffix = single[:at], single[at + len(a):]
        pair = tokenizer("a", "b")
        ids = pair["input_ids"]
        types = pair.get("token_type_ids") or [0] * len(ids)
        at_a = _find(ids, a)
        at_b = _find(ids, b, at_a + len(a))
        self.pair_prefix, self.pair_middle, self.pair_suffix = ids[:at_a], ids[at_a + len(a):at_b], ids[at_b + len(b):]
        self.pair_types = (types[:at_a], types[at_a], types[at_a + len(a):at_b], types[at_b], types[at_b + len(b):])

    @property
    def prefix_length(self) -> int:
        """Special tokens before a single text (1 for ``[CLS]``)."""
        return len(self.single_prefix)

    def single(self, ids: list[int]) -> list[int]:
        return [*self.single_prefix, *ids, *self.single_suffix]

    def pair(self, first: list[int], second: list[int]) -> tuple[list[int], list[int]]:
        """Ids and token-type ids of ``first`` and ``second`` as one input."""
        prefix_t, first_t, middle_t, second_t, suffix_t = self.pair_types
        ids = [*self.pair_prefix, *first, *self.pair_middle, *second, *self.pair_suffix]
        types = [*prefix_t, *([first_t] * len(first)), *middle_t, *([second_t] * len(second)), *suffix_t]
        return ids, types

    def extra(self, pair: bool) -> int:
        """Special tokens added to one text (``pair=False``) or to a pair."""
        if pair:
            return len(self.pair_prefix) + len(self.pair_middle) + len(self.pair_suffix)
        return len(self.single_prefix) + len(self.single_suffix)


def pad_ids(sequences: Sequence[Sequence[int]], pad_id: int):
    """Right-pad id lists into ``(ids [N, L] long, mask [N, L] bool)`` (True = real token)."""
    import torch

    width = max(1, max(map(len, sequences)))
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.bool)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        mask[row, : len(sequence)] = True
    return ids, mask


def unique_rows(keys: Sequence[Hashable]) -> tuple[list[int], list[int]]:
    """Distinct keys of a batch (the two-tower models encode each text once): ``(first occurrence of each distinct key, index of each key's distinct row)``."""
    rows: dict[Hashable, int] = {}
    firsts, index = [], []
    for position, key in enumerate(keys):
        if key not in rows:
            rows[key] = len(firsts)
            firsts.append(position)
        index.append(rows[key])
    return firsts, index


def tokenizer_fingerprint(tokenizer) -> str:
    """A short digest of the tokenizer's vocabulary (a checkpoint must be read with the same one)."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha1(json.dumps(vocab, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


class AuxiliaryLossTrainer(Trainer):
    """The project's :class:`~rerankers.training.loop.Trainer` whose loss also adds the re-ranker's auxiliary
    loss for the batch just scored (``reranker.auxiliary_loss(number_of_units)``; ``None`` adds nothing)."""

    def loss(self, scores, units):
        loss = super().loss(scores, units)
        hook = getattr(self.reranker, "auxiliary_loss", None)
        extra = hook(len(units)) if hook is not None else None
        return loss if extra is None else loss + extra.to(loss.dtype)


class TransformerReranker(TorchReranker):
    """Re-ranker fine-tuning a pre-trained transformer encoder: see the module docstring."""

    name: ClassVar[str] = "transformer"
    model_config_class: ClassVar[type] = object
    #: names of the pre-trained encoder's parameters in ``module`` start with these (``head_learning_rate``)
    pretrained_prefixes: ClassVar[tuple[str, ...]] = ("encoder.",)
    #: defaults of this model's options (ablation subclasses flip model ones); all overridable with --set
    model_defaults: ClassVar[Mapping[str, Any]] = {}
    encoder_defaults: ClassVar[Mapping[str, Any]] = {}
    train_defaults: ClassVar[Mapping[str, Any]] = {
        "learning_rate": 2e-5, "optimizer": "adamw", "weight_decay": 0.01, "grad_clip": 1.0,
        "batch_size": 32, "epochs": 5, "patience": 2, "score_batch_size": 64,
    }
    #: the description file of this model's Hugging Face export (:meth:`save_pretrained`), and the file of
    #: its weights outside the encoder (``None``: the model has none)
    pretrained_config_file: ClassVar[str] = "neural_rerank.json"
    pretrained_head_file: ClassVar[str | None] = None

    def __init__(self, model_config=None, encoder_config: EncoderConfig | None = None, train_config=None,
                 seed: int = 42):
        self.model_config = model_config if model_config is not None else self.model_config_class(**self.model_defaults)
        self.encoder_config = encoder_config or EncoderConfig(**self.encoder_defaults)
        self.train_config = train_config if train_config is not None else self.default_train_config()
        self.seed = seed
        self.tokenizer = None
        self.special: SpecialTokens | None = None
        self.module = None
        self.device = None
        self.encoder_description: dict | None = None
        self._query_tokens = LRUCache(8192)
        self._doc_tokens = LRUCache(131072)
        self._threads_set = False
        #: True once :meth:`quantize_int8` replaced the module by its int8 form (scoring only)
        self.quantized = False
        #: ``(weights key, module)``: the bfloat16 copy :meth:`_bf16_context` scores with
        self._bf16_copy = None

    # -- construction ------------------------------------------------------------------------------
    def option_configs(self) -> list:
        """Model, encoder and training configs (the targets of ``--set``)."""
        return [self.model_config, self.encoder_config, self.train_config]

    def build_module(self, encoder):
        """The model's torch module around ``encoder`` (a pre-trained ``AutoModel``; subclasses implement)."""
        raise NotImplementedError

    def load_pretrained(self):
        """``(tokenizer, model)`` that :meth:`build_module` receives: by default the encoder's ``AutoModel``
        (:func:`~rerankers.encoders.load_encoder`); a subclass may load the same checkpoint with a head."""
        return load_encoder(self.encoder_config.encoder)

    def prepare(self, train=None, dataset=None) -> None:
        """Load the encoder and its tokenizer and build a fresh module (``train``/``dataset`` are not needed:
        a transformer brings its own vocabulary; they are accepted for the Trainer's protocol)."""
        self._build()
        log.info("%s: encoder %s (%d parameters)", self.name, self.encoder_config.encoder,
                 sum(p.numel() for p in self.module.parameters()))

    def _build(self) -> None:
        import torch

        tokenizer, encoder = self.load_pretrained()
        self.tokenizer = tokenizer
        self.special = SpecialTokens(tokenizer)
        config = encoder.config
        needed = self.max_input_length()
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and needed > limit:
            raise PipelineError(f"{self.name}: inputs of up to {needed} tokens do not fit encoder "
                                f"{self.encoder_config.encoder!r} (max_position_embeddings {limit}); lower "
                                f"max_query_length/max_doc_length")
        self.encoder_description = {
            "name": self.encoder_config.encoder,
            "architecture": {key: getattr(config, key, None) for key in _ARCHITECTURE_KEYS},
            "tokenizer": tokenizer_fingerprint(tokenizer),
        }
        self._query_tokens.clear()
        self._doc_tokens.clear()
        torch.manual_seed(self.seed)  # the heads built next are the same for the same seed
        self.module = self.build_module(encoder)
        self.clear_cache()

    def max_input_length(self) -> int:
        """The longest input the encoder sees (special tokens included); checked against the encoder."""
        config = self.encoder_config
        return max(config.max_query_length, config.max_doc_length) + self.special.extra(pair=False)

    # -- tokens ------------------------------------------------------------------------------------
    def _require_prepared(self) -> None:
        if self.module is None or self.tokenizer is None:
            raise PipelineError(f"{self.name} is not prepared: call prepare() or load a checkpoint")

    def _token_ids(self, cache: LRUCache, items: Sequence[tuple[Hashable, str]], limit: int) -> list[list[int]]:
        """Word-piece ids (no special tokens, at most ``limit``) of ``(key, text)`` items, through ``cache``;
        the texts not cached are tokenized in one call."""
        found = [cache.get(key) for key, _ in items]
        missing = [i for i, ids in enumerate(found) if ids is None]
        if missing:
            texts = [items[i][1] for i in missing]
            encoded = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=limit)["input_ids"]
            for i, ids in zip(missing, encoded):
                found[i] = list(ids)
                cache.put(items[i][0], found[i])
        return found

    @staticmethod
    def query_key(query: Query) -> Hashable:
        return query.text

    @staticmethod
    def doc_key(doc: Doc) -> Hashable:
        return (doc.doc_id, doc.text)

    def query_ids(self, queries: Sequence[Query]) -> list[list[int]]:
        return self._token_ids(self._query_tokens, [(self.query_key(q), q.text) for q in queries],
                               self.encoder_config.max_query_length)

    def doc_ids(self, docs: Sequence[Doc]) -> list[list[int]]:
        return self._token_ids(self._doc_tokens, [(self.doc_key(d), d.text) for d in docs],
                               self.encoder_config.max_doc_length)

    def pair_length(self, query: Query, doc: Doc) -> int:
        """Padded length that matters for batching: the document's word pieces (capped)."""
        self._require_prepared()
        return len(self.doc_ids([doc])[0])

    # -- tensors -----------------------------------------------------------------------------------
    def encode(self, pairs: Sequence[tuple[Query, Doc]]) -> dict:
        """A batch of tensors for ``pairs`` (subclasses implement)."""
        raise NotImplementedError

    def _device(self):
        return self.device or next(self.module.parameters()).device

    def tensors(self, batch: Mapping[str, Any]) -> dict:
        """The tensor entries of ``batch`` on the module's device (other entries, e.g. keys, are dropped)."""
        import torch

        device = self._device()
        return {k: v.to(device) for k, v in batch.items() if torch.is_tensor(v)}

    def forward(self, batch: Mapping[str, Any]):
        """Scores ``[B]`` for an encoded batch."""
        return self.module(**self.tensors(batch))

    def auxiliary_loss(self, units: int):
        """Extra training loss of the batch just scored in training mode, already weighted and averaged
        over the ``units`` training units of the batch; ``None`` when the model has none (the default)."""
        return None

    def clear_cache(self) -> None:
        """Forget cached encoder outputs (after the weights change). Token caches stay valid."""

    def _bf16_context(self):
        """Score with a bfloat16 copy of the module (encoder, heads around it; score heads float32), under
        autocast for any float32 tensor met on the way. Unlike autocast around float32 weights, activations
        stay bfloat16 from layer to layer, which saves the casts around every product (BENCHMARKS.md,
        "Scoring throughput": 1.4-1.6x faster again than autocast alone, with about twice its score drift).
        The float32 module stays what :meth:`fit` trains and :meth:`save` writes; the copy is remade when
        the module or any of its weights changed (parameter versions)."""
        import contextlib
        import copy

        import torch

        from .blocks import score_heads, score_heads_in_float32

        key = (id(self.module), tuple(p._version for p in self.module.parameters()))
        if self._bf16_copy is None or self._bf16_copy[0] != key:
            module = copy.deepcopy(self.module)
            heads = {layer: {k: v.clone() for k, v in layer.state_dict().items()} for layer in score_heads(module)}
            module.to(torch.bfloat16)
            for layer, weights in heads.items():                # score heads keep their float32 weights
                layer.float().load_state_dict(weights)
            score_heads_in_float32(module)
            self._bf16_copy = (key, module.eval())

        @contextlib.contextmanager
        def swapped():
            float32, self.module = self.module, self._bf16_copy[1]
            try:
                with torch.autocast(device_type=next(float32.parameters()).device.type, dtype=torch.bfloat16):
                    yield
            finally:
                self.module = float32
        return swapped()

    # -- protocol ----------------------------------------------------------------------------------
    def before_scoring(self, docs: Sequence[Doc], queries: Sequence[Query] = ()) -> None:
        """Tokenize the scoring call's uncached documents in one tokenizer call, and its queries in another."""
        self.doc_ids(docs)
        self.query_ids(queries)

    def quantize_int8(self) -> "TransformerReranker":
        """Quantize the module for CPU scoring: every ``nn.Linear`` (the encoder's attention and
        feed-forward layers, the heads) becomes a dynamically quantized int8 layer
        (``torch.ao.quantization.quantize_dynamic``: int8 weights, each layer's input quantized at run time
        with one scale per batch). Embeddings, layer norms and attention products stay float.

        Scores change a little (BENCHMARKS.md, "Scoring speed", measures what it costs), and since the
        input scale is the batch's, a pair's int8 score also depends a little on the batch it is scored in
        (float scores do not). The model can then only score: :meth:`fit` and :meth:`save` refuse.
        Quantized kernels exist for the CPU only: a module trained on a GPU moves to the CPU first (int8
        is a CPU scoring path; score on the GPU in float instead). Idempotent; returns the re-ranker."""
        import torch
        from torch.ao.quantization import quantize_dynamic

        self._require_prepared()
        if self.quantized:
            return self
        if self.bf16:
            raise PipelineError(f"{self.name}: a model scoring in bfloat16 cannot also be quantized to int8")
        self.module.to("cpu")
        self.device = torch.device("cpu")
        self.module.eval()
        with warnings.catch_warnings():
            # torch 2.13 (the pinned version) warns that eager quantization is to move to torchao, a package
            # this project does not install; the API works in the pinned version, so the warnings are noise
            warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=UserWarning)
            warnings.filterwarnings("ignore", message=r".*quantiz.*deprecated", category=DeprecationWarning)
            self.module = quantize_dynamic(self.module, {torch.nn.Linear}, dtype=torch.qint8)
        self.quantized = True
        self.clear_cache()  # cached encoder outputs came from the float weights
        return self

    def _require_float(self, action: str) -> None:
        if self.quantized:
            raise PipelineError(f"{self.name}: cannot {action} an int8-quantized model (it is for scoring "
                                f"only); use the float model")

    def fit(self, train, dev=None, state_path=None):
        """Fine-tune with the project's Trainer (plus :meth:`auxiliary_loss`); call :meth:`prepare` first.
        ``state_path``: where the per-epoch training state is kept so that an interrupted fit resumes."""
        if self.module is None:
            raise PipelineError(f"{self.name}: call prepare(train, dataset) before fit()")
        self._require_float("train")
        self.clear_cache()
        try:
            return AuxiliaryLossTrainer(self, self.train_config, self.seed).fit(train, dev, state_path)
        finally:
            self.clear_cache()  # the Trainer restores the best epoch's weights: cached outputs are stale

    # -- checkpoints -------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write name, class, configs, encoder description, versions and weights to ``path`` atomically."""
        import torch
        import transformers

        if self.module is None:
            raise PipelineError(f"{self.name}: nothing to save (not prepared)")
        self._require_float("save")
        payload = {
            "format": CHECKPOINT_FORMAT,
            "kind": CHECKPOINT_KIND,
            "reranker": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "model_config": dataclasses.asdict(self.model_config),
            "encoder_config": dataclasses.asdict(self.encoder_config),
            "train_config": dataclasses.asdict(self.train_config),
            "seed": self.seed,
            "encoder": dict(self.encoder_description or {}),
            "state_dict": {k: v.detach().cpu() for k, v in self.module.state_dict().items()},
            "versions": {"project": project_version(), "torch": str(torch.__version__),
                         "transformers": str(transformers.__version__), "python": platform.python_version()},
        }
        save_checkpoint(path, payload)

    @classmethod
    def load(cls, path) -> "TransformerReranker":
        """Read a checkpoint written by :meth:`save`, or a directory written by :meth:`save_pretrained`; a
        wrong model, format, encoder or weights is a :class:`~pipeline.core.errors.CheckpointError` naming ``path``."""

        path = Path(path)
        if path.is_dir():
            return cls.from_pretrained(path)
        payload = load_checkpoint(path)
        if payload.get("format") != CHECKPOINT_FORMAT or payload.get("kind") != CHECKPOINT_KIND:
            found = (payload.get("format"), payload.get("kind"))
            raise CheckpointError(f"{path}: not a transformer re-ranker checkpoint (format/kind {found!r})")
        if payload.get("reranker") != cls.name:
            raise CheckpointError(f"{path}: holds a {payload.get('reranker')!r} model, not {cls.name!r}")
        try:
            model_config = cls.model_config_class(**payload["model_config"])
            encoder_config = EncoderConfig(**payload["encoder_config"])
            train_config = TrainConfig(**payload["train_config"])
        except (TypeError, KeyError, PipelineError, ValueError) as error:
            raise CheckpointError(f"{path}: config does not match this version of {cls.name} ({error})") from None
        reranker = cls(model_config, encoder_config, train_config, payload.get("seed", 42))
        try:
            reranker._build()
        except PipelineError as error:
            raise CheckpointError(f"{path}: cannot rebuild its encoder {encoder_config.encoder!r} ({error})") from None
        saved = payload.get("encoder") or {}
        current = reranker.encoder_description
        for key in ("architecture", "tokenizer"):
            if saved.get(key) != current.get(key):
                raise CheckpointError(f"{path}: encoder {encoder_config.encoder!r} as found now does not match the "
                                      f"one it was trained with ({key}: saved {saved.get(key)!r}, found "
                                      f"{current.get(key)!r})")
        try:
            reranker.module.load_state_dict(payload["state_dict"])
        except (RuntimeError, KeyError) as error:
            raise CheckpointError(f"{path}: weights do not fit {cls.name} with the saved config ({error})") from None
        reranker.module.eval()
        reranker.clear_cache()
        return reranker

    # -- Hugging Face directories (rerankers/hf_export.py) -------------------------------------------------
    def export_description(self) -> dict:
        """What the export's description file records: name, class, configs, seed, the encoder it was
        trained on (name, architecture, tokenizer fingerprint), the head weights' file and versions."""
        from .hf_export import library_versions

        return {
            "reranker": self.name,
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "model_config": dataclasses.asdict(self.model_config),
            "encoder_config": dataclasses.asdict(self.encoder_config),
            "train_config": dataclasses.asdict(self.train_config),
            "seed": self.seed,
            "encoder": dict(self.encoder_description or {}),
            "head_weights": self.pretrained_head_file,
            "versions": library_versions(),
        }

    def _export_ready(self) -> None:
        if self.module is None or self.tokenizer is None:
            raise PipelineError(f"{self.name}: nothing to export (not prepared, trained or loaded)")
        self._require_float("export")

    def save_pretrained(self, directory) -> Path:
        """Write the model as a Hugging Face directory (written atomically; an existing ``directory`` is
        replaced as a whole): the encoder with ``save_pretrained`` and its tokenizer (both standard), the
        weights outside the encoder in :attr:`pretrained_head_file` (safetensors) and the description in
        :attr:`pretrained_config_file`. :meth:`from_pretrained` reads it back with identical scores."""
        from .hf_export import save_weights, write_description, write_directory

        self._export_ready()
        head = {key: value for key, value in self.module.state_dict().items() if not key.startswith("encoder.")}
        if head and self.pretrained_head_file is None:
            raise PipelineError(f"{self.name}: has weights outside its encoder ({', '.join(sorted(head)[:3])}, "
                                f"...) but no file to export them to (pretrained_head_file)")

        def write(target: Path) -> None:
            self.module.encoder.save_pretrained(target)
            self.tokenizer.save_pretrained(target)
            if self.pretrained_head_file is not None:
                save_weights(target / self.pretrained_head_file, head)
            write_description(target, self.pretrained_config_file, self.export_description())

        return write_directory(directory, write)

    @classmethod
    def from_pretrained(cls, directory) -> "TransformerReranker":
        """The re-ranker that :meth:`save_pretrained` wrote to ``directory`` (an ablation's export read
        through its parent class comes back as that ablation), scoring exactly as it did. A directory that
        is no such export, or one of another model, is a :class:`~pipeline.core.errors.CheckpointError` naming it."""
        from .hf_export import export_class, read_description

        directory = Path(directory)
        description = read_description(directory, cls.pretrained_config_file)
        return export_class(directory, description, cls)._restore_pretrained(directory, description)

    @classmethod
    def _restore_pretrained(cls, directory: Path, description: Mapping[str, Any],
                            options: Mapping[str, Any] | None = None) -> "TransformerReranker":
        """Rebuild from an export's ``description``: its configs (``--set``-style ``options`` applied over
        them, ``encoder`` excepted) on the directory's encoder, then the head."""
        where = directory / cls.pretrained_config_file
        try:
            model_config = cls.model_config_class(**description["model_config"])
            encoder_config = EncoderConfig(**description["encoder_config"])
            train_config = TrainConfig(**description["train_config"])
        except (TypeError, KeyError, PipelineError, ValueError) as error:
            raise CheckpointError(f"{where}: config does not match this version of {cls.name} ({error})") from None
        reranker = cls(model_config, encoder_config, train_config, description.get("seed", 42))
        if options:
            apply_overrides(reranker.option_configs(), options)
        encoder_config.encoder = str(directory.resolve())  # the exported (fine-tuned) encoder, not the original
        reranker._before_restore(directory, description)
        try:
            reranker._build()
        except PipelineError as error:
            raise CheckpointError(f"{directory}: cannot rebuild {cls.name} on its encoder ({error})") from None
        saved = (description.get("encoder") or {}).get("tokenizer")
        found = reranker.encoder_description["tokenizer"]
        if saved and saved != found:
            raise CheckpointError(f"{directory}: its tokenizer files are not the ones the model was exported with "
                                  f"(vocabulary fingerprint saved {saved!r}, found {found!r})")
        reranker._restore_head(directory, description)
        reranker.module.eval()
        reranker.clear_cache()
        return reranker

    def _before_restore(self, directory: Path, description: Mapping[str, Any]) -> None:
        """Hook run before an export's module is built (the cross-encoder picks its head kind here)."""

    def _restore_head(self, directory: Path, description: Mapping[str, Any]) -> None:
        """Load the weights outside the encoder from :attr:`pretrained_head_file`; they must be exactly the
        module's own (names and shapes), else a :class:`~pipeline.core.errors.CheckpointError`."""
        from .hf_export import load_weights

        expected = {key for key in self.module.state_dict() if not key.startswith("encoder.")}
        if self.pretrained_head_file is None:
            if expected:
                raise CheckpointError(f"{directory}: {self.name} has weights outside its encoder but no head file")
            return
        state = load_weights(directory / self.pretrained_head_file)
        if set(state) != expected:
            missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
            raise CheckpointError(f"{directory / self.pretrained_head_file}: weights do not fit {self.name} with "
                                  f"the saved config (missing {missing[:5]}, unexpected {extra[:5]})")
        try:
            self.module.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise CheckpointError(f"{directory / self.pretrained_head_file}: weights do not fit {self.name} with "
                                  f"the saved config ({error})") from None
