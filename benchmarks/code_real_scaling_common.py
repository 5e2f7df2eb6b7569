"""What every step of ``code_real_scaling.py`` shares: the union's collections, the encoder's options, the
work folder's layout and the JSON each step writes."""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (prefix, dataset name) of every shipped passage collection
COLLECTIONS = (("mb", "microblog"), ("dl", "dl"), ("nf", "nfcorpus"), ("va", "vaswani-npl"), ("cr", "cranfield"))
#: the encoder of the other code benchmarks (code_latency.py, code_first_stage.py): 512-bit lsh codes over the
#: float encoder trained 10 steps on NFCorpus's dev queries (train_dataset nfcorpus -> nfcorpus-dev)
ENCODER_OPTIONS = dict(kind="codes", dim=512, hash_head="lsh", steps=10, train_dataset="nfcorpus")
#: the same options as ``pipeline.index`` flags
INDEX_FLAGS = [part for name, value in ENCODER_OPTIONS.items() for part in (f"--{name.replace('_', '-')}", str(value))]
K = 100
#: the union's BEIR folder inside ``--work`` (and the dataset name of its index)
UNION = "union"
SHARD_SIZE = 1024  # CodeOptions.shard_size's default: documents per shard


def measure_file(work: Path, vectors: int) -> Path:
    """The JSON the ``measure`` step writes for the size of ``vectors`` vectors (0: every shard)."""
    return Path(work) / f"measure-{vectors or 'all'}.json"


def now() -> str:
    """The current UTC time, as the steps' JSON records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_json(path: Path, value) -> None:
    """Write ``value`` as indented JSON to ``path`` atomically (a step interrupted leaves no half file)."""
    from pipeline.core.atomic import write_text

    write_text(Path(path), json.dumps(value, indent=1) + "\n")


def command_line(script: str = "benchmarks/code_real_scaling.py") -> str:
    """The command that runs this process, as a step's JSON records it."""
    return "python " + shlex.join([script, *sys.argv[1:]])


def code_root() -> Path:
    """The code indexes' cache folder of ``PIPELINE_HOME``."""
    from indexes.codes import code_index_root

    return code_index_root()


def load_union(work: Path):
    """The union written by the ``union`` step, as a dataset."""
    from pipeline.core.datasets import load_local

    return load_local(work / UNION)
