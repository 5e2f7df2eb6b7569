"""Options of the learned-code first stages (:class:`CodeOptions`), the cache root and file names."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path


from pipeline.core.errors import PipelineError
from pipeline.core.home import index_root

from infra.onnx_runtime import QUERY_RUNTIMES

from ..base import check_choice


log = logging.getLogger(__name__)


def code_option(default, help: str, cli: bool = True, compare: bool = True):
    """A :class:`CodeOptions` field with its help; ``pipeline.index``'s flags and ``pipeline.run``'s
    ``--code-set`` names are derived from these fields (``cli=False``: not a flag of its own)."""
    return field(default=default, compare=compare, metadata={"help": help, "group": "codes / colbert", "cli": cli})

KINDS = ("codes", "colbert")
INDEX_TYPES = ("flat", "hnsw", "ivf")
HASH_HEADS = ("mlp", "lsh")
META_FILE = "code-index.json"
FAISS_FILE = "faiss.index"
TOKEN_DOCS_FILE = "token_docs.npy"  # format 1: each vector's document number (int32)
DOC_IDS_FILE = "doc_ids.json"  # format 1: the document ids, one JSON list
DOC_OFFSETS_FILE = "doc_offsets.npy"  # format 2: document d's vectors are rows offsets[d]:offsets[d + 1] (int64)
DOC_ID_BYTES_FILE = "doc_ids.utf8.npy"  # format 2: the document ids' UTF-8 bytes, concatenated (uint8)
DOC_ID_OFFSETS_FILE = "doc_id_offsets.npy"  # format 2: id d is bytes offsets[d]:offsets[d + 1] (int64)
#: the layout of an index directory written by this version (``format`` in its metadata; absent: 1). 3: an
#: IVF index stores each vector's list number instead of its position in list order; 4: it carries the list
#: numbers in its faiss ids instead (indexes/codes/ivf.py; a build too large for that writes 3)
INDEX_FORMAT = 4
#: the layouts this version reads (formats 2, 3 and 4 differ only in an IVF index's files)
READ_FORMATS = (1, 2, 3, 4)
#: documents re-scored exactly per query by default (the best by their score estimated from the kNN step).
#: nDCG@10 stays within .003 of re-scoring every candidate down to 64 on NFCorpus and Vaswani, but the top
#: 100's recall does not: R@100 .2953 -> .2921 (256) / .2813 (64) on NFCorpus, .6501 -> .6329 / .5798 on
#: Vaswani (benchmarks/results/codes/latency.md). A first stage feeds a re-ranker, so the default keeps the
#: recall; 64 or 32 are the latency settings (`--code-set rescore_depth=64`).
RESCORE_DEPTH = 256
#: arithmetic of the query encoder at search time: float32, or int8 (CPU, dynamically quantized transformer)
QUERY_PRECISIONS = ("float32", "int8")
QUERY_PRECISION = "float32"
#: what runs the query encoder at search time: ONNX Runtime (``onnx``: 2.4-2.7x faster per query on one CPU
#: thread, benchmarks/results/codes/query-encoder-runtime.md), PyTorch (``torch``), or ``auto``: ONNX Runtime
#: on the CPU for float32 queries when onnxruntime and onnx are installed, else PyTorch
QUERY_RUNTIME = "auto"
ENCODER_FILE = "encoder.pt"
ENCODER_META = "encoder.json"
SHARD_MANIFEST = "manifest.json"
CHECKPOINT_FORMAT = 1
GPU_MAX_K = 2048  # faiss GPU indexes return at most this many neighbours

#: Datasets without a ``train`` split whose training queries live in another dataset (same collection,
#: disjoint queries): NFCorpus's test set trains on NFCorpus's dev queries and documents.
TRAINING_COMPANIONS = {"nfcorpus": "nfcorpus-dev", "nfcorpus/test": "nfcorpus-dev",
                       "beir/nfcorpus/test": "nfcorpus-dev"}


def code_index_root() -> Path:
    """Where code indexes live: ``PIPELINE_INDEX_DIR`` (like the Lucene indexes), else
    ``<home>/indexes/cache/codes`` (:mod:`pipeline.core.home`)."""
    return index_root("codes")


def _digest(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class CodeOptions:
    """Options of a code index. Fields marked ``compare=False`` change neither the encoder nor the index
    (so they are not part of the cache key)."""

    kind: str = code_option("codes", "codes (binary) | colbert (float)", cli=False)
    encoder: str = code_option("all-MiniLM-L6-v2", "infra.encoders name or local directory")
    dim: int = code_option(128, "bits per code / floats per vector")
    train_dataset: str | None = code_option(None, "train the encoder on this dataset's training queries (default: the dataset's own; required when it has none)")
    steps: int = code_option(500, "training steps")
    batch_size: int = code_option(16, "training queries per step")
    learning_rate: float = code_option(2e-5, "learning rate of the transformer")
    head_learning_rate: float = code_option(1e-3, "learning rate of the projection")
    max_query_length: int = code_option(32, "word pieces kept of a query")  # persisted as query_max_length
    max_doc_length: int = code_option(180, "word pieces kept of a document")  # persisted as doc_max_length
    hard_negatives: int = code_option(1, "BM25 negatives per query and step (0: in-batch negatives only)")
    negative_depth: int = code_option(100, "BM25 depth the hard negatives come from")
    alpha: float = code_option(5.0, "tanh(alpha x) while training the binary codes")
    quantization_weight: float = code_option(0.1, "weight of (tanh(alpha x) - sign(x))^2 (binary kind)")
    straight_through: bool = code_option(False, "binary: train on the sign codes the index stores ")
    hash_head: str = code_option("mlp", "binary: mlp (ADDAX's hashing MLP) | lsh (hyperplanes over a float encoder)")
    float_dim: int = code_option(128, "lsh: dimension of the float (colbert) encoder the hyperplanes cut")
    hash_steps: int = code_option(0, "lsh: steps fine-tuning the hashed encoder after its initialisation")
    hash_seed: int | None = code_option(None, "lsh: seed of the hyperplanes (default: seed)")
    hash_draws: int = code_option(1, "lsh: hyperplane draws tried; the one agreeing best with the floats is kept")
    hash_center: bool = code_option(False, "lsh: hash v - mu (mu: mean token vector of the indexed documents)")
    temperature: float = code_option(0.1, "softmax temperature on the MaxSim scores")
    seed: int = code_option(42, "training seed (and of the lsh hyperplanes unless hash_seed)")
    index_type: str = code_option("flat", "flat | hnsw | ivf (inverted lists, memory-mapped: large collections)")
    hnsw_m: int = code_option(32, "hnsw: neighbours per graph node")
    ivf_nlist: int = code_option(0, "ivf: inverted lists (default 0: 4 x sqrt(token vectors), at most 32,768)")
    # not part of the cache key
    k_prime: int = code_option(256, "neighbours per query token at search time", compare=False)
    ivf_nprobe: int = code_option(16, "ivf: lists visited per query token at search time", compare=False)
    rescore_depth: int = code_option(RESCORE_DEPTH, "documents per query re-scored by exact MaxSim: the best "
                                     "by a score estimated from the kNN results; the rest of the top k follow in "
                                     "estimated order (0: every candidate)", compare=False)
    query_precision: str = code_option(QUERY_PRECISION, "query encoder at search time: float32 | int8 (CPU: "
                                       "faster, scores change slightly)", compare=False)
    query_runtime: str = code_option(QUERY_RUNTIME, "what runs the query encoder: auto | torch | onnx (ONNX "
                                     "Runtime, CPU, float32: same vectors within 1e-5, faster; auto: onnx when "
                                     "installed and possible)", compare=False)
    mmap: bool = code_option(True, "ivf: search the index and its vectors memory-mapped from disk", cli=False,
                             compare=False)
    shard_size: int = code_option(1024, "documents per resumable shard", compare=False)
    encode_batch_size: int = code_option(32, "documents per encoding batch", compare=False)
    device: str = code_option("auto", "auto | cpu | cuda", compare=False)
    threads: int | None = code_option(None, "torch and faiss CPU threads (None: their defaults)", cli=False, compare=False)
    progress: bool = code_option(True, "progress bars while encoding", cli=False, compare=False)

    def __post_init__(self):
        check_choice("code index kind", self.kind, KINDS)
        check_choice("hash head", self.hash_head, HASH_HEADS)
        if self.hash_head != "mlp" and not self.binary:
            raise PipelineError(f"hash_head {self.hash_head!r} is for binary codes (kind 'codes'), not {self.kind!r}")
        if self.hash_seed is not None and self.hash_head != "lsh":
            raise PipelineError(f"hash_seed draws the hyperplanes of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_draws < 1:
            raise PipelineError(f"hash_draws must be at least 1, got {self.hash_draws}")
        if self.hash_draws > 1 and self.hash_head != "lsh":
            raise PipelineError(f"hash_draws chooses among hyperplane draws of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_center and self.hash_head != "lsh":
            raise PipelineError(f"hash_center centres the hyperplanes of hash_head 'lsh', not {self.hash_head!r}")
        if self.hash_center and self.hash_steps:
            raise PipelineError("hash_center codes are not fine-tuned (hash_steps must be 0): their scores decode "
                                "unit vectors, which the binary training loss does not model")
        if self.float_dim <= 0 or self.hash_steps < 0:
            raise PipelineError(f"float_dim must be positive and hash_steps >= 0, got {self.float_dim} and "
                                f"{self.hash_steps}")
        check_choice("index type", self.index_type, INDEX_TYPES)
        if self.dim <= 0 or (self.binary and self.dim % 8):
            raise PipelineError(f"dim must be positive{' and a multiple of 8 for binary codes' if self.binary else ''}, "
                                f"got {self.dim}")
        for name in ("steps", "hard_negatives"):
            if getattr(self, name) < 0:
                raise PipelineError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.rescore_depth < 0:
            raise PipelineError(f"rescore_depth must be >= 0 (0: re-score every candidate), got {self.rescore_depth}")
        if self.query_precision not in QUERY_PRECISIONS:
            raise PipelineError(f"unknown query_precision {self.query_precision!r}; expected one of "
                                f"{', '.join(QUERY_PRECISIONS)}")
        check_choice("query runtime", self.query_runtime, QUERY_RUNTIMES)
        if self.query_runtime == "onnx" and self.query_precision != "float32":
            raise PipelineError(f"query_runtime onnx encodes float32 queries; query_precision {self.query_precision!r} "
                                f"runs in PyTorch (use query_runtime auto or torch)")
        if self.ivf_nlist < 0:
            raise PipelineError(f"ivf_nlist must be >= 0 (0: automatic), got {self.ivf_nlist}")
        for name in ("batch_size", "max_query_length", "max_doc_length", "k_prime", "shard_size", "ivf_nprobe",
                     "encode_batch_size", "negative_depth", "hnsw_m"):
            if getattr(self, name) <= 0:
                raise PipelineError(f"{name} must be positive, got {getattr(self, name)}")
        if self.temperature <= 0:
            raise PipelineError(f"temperature must be positive, got {self.temperature}")

    @property
    def binary(self) -> bool:
        return self.kind == "codes"

    def training_fields(self) -> dict:
        """The options that determine the trained encoder (with the training data)."""
        names = ("kind", "encoder", "dim", "steps", "batch_size", "learning_rate", "head_learning_rate",
                 "max_query_length", "max_doc_length", "hard_negatives", "negative_depth", "alpha",
                 "quantization_weight", "temperature", "seed")
        later = {k: v for k, v in self._later_fields().items() if k != "ivf_nlist"}  # the index's, not the encoder's
        return {**{PERSISTED_NAMES.get(name, name): getattr(self, name) for name in names}, **later}

    def key_fields(self) -> dict:
        """Everything in the cache key of an index (besides the dataset and the training data)."""
        fields = {PERSISTED_NAMES.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.compare and f.name not in ("train_dataset", *LATER_FIELDS)}
        return {**fields, **self._later_fields()}

    def float_options(self) -> "CodeOptions":
        """The float (colbert) encoder an ``lsh`` hash head starts from: these training options, ``float_dim``."""
        return dataclasses.replace(self, kind="colbert", dim=self.float_dim, hash_head="mlp", hash_steps=0,
                                   hash_seed=None, hash_draws=1, hash_center=False, straight_through=False,
                                   float_dim=CodeOptions.float_dim)

    @property
    def hyperplane_seed(self) -> int:
        """The seed of an ``lsh`` head's hyperplanes: ``hash_seed``, else the training ``seed``."""
        return self.seed if self.hash_seed is None else self.hash_seed

    def _later_fields(self) -> dict:
        # options added after the first indexes were built are in the keys only where they change training
        # (binary codes, not at their defaults), so that the keys of encoders and indexes built before them
        # stay the same
        fields = {"ivf_nlist": self.ivf_nlist} if self.index_type == "ivf" else {}
        if not self.binary:
            return fields
        if self.straight_through:
            fields["straight_through"] = True
        if self.hash_head != "mlp":
            fields.update(hash_head=self.hash_head, float_dim=self.float_dim, hash_steps=self.hash_steps)
            if self.hash_seed is not None and self.hash_seed != self.seed:  # the same draw, the same key
                fields.update(hash_seed=self.hash_seed)
            if self.hash_draws > 1:
                fields.update(hash_draws=self.hash_draws)
            if self.hash_center:
                fields.update(hash_center=True)
        return fields


#: fields renamed after indexes were cached: their metadata, checkpoints and cache keys keep the first names
PERSISTED_NAMES = {"max_query_length": "query_max_length", "max_doc_length": "doc_max_length"}

#: CodeOptions fields that enter the cache keys only when they matter (see ``CodeOptions._later_fields``).
LATER_FIELDS = ("straight_through", "hash_head", "float_dim", "hash_steps", "hash_seed", "hash_draws", "hash_center",
                "ivf_nlist")

