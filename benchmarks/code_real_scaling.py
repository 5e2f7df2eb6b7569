"""The code index at scale on real token codes: every shipped passage collection in one index.

The synthetic table of ``code_index_scaling.py`` measures flat against IVF on random clustered codes; this
benchmark measures the same on the real 512-bit codes of one trained encoder over the union of the shipped
collections (Microblog's tweets, the TREC DL 2019-2021 pools, NFCorpus, Vaswani, Cranfield). This file is
the command line; each step is a subcommand that writes JSON into ``--work``, its code in the file named
after it (``union``, ``cut``, ``grow``: ``code_real_scaling_union.py``; ``estimate``, ``simulate``:
``code_real_scaling_build.py``; ``measure``: ``code_real_scaling_measure.py``; ``report``:
``code_real_scaling_report.py``; what they share: ``code_real_scaling_common.py``):

``union``
    Write the union as a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``): document
    ids prefixed by their collection (``mb-``, ``dl-``, ``nf-``, ``va-``, ``cr-``), the documents in a seeded
    random order (so that every prefix, and a ``--max-docs`` cut, is a uniform sample of all collections),
    ``--queries-per`` judged queries of each collection (ids prefixed too). Any command that takes a
    ``--dataset`` reads it (``pipeline.core.datasets.load_local``).
``estimate``
    Count every document's token vectors (word pieces after truncation, special tokens excluded) and time
    the encoder on ``--sample`` documents of the union, one thread: the vectors and encoding time to expect.
``simulate``
    Run the documented multi-process build, ``torchrun --nproc-per-node N -m pipeline.index --kind codes
    --index-type ivf ...``, end to end, and record when each stage ends by watching the cache (the last
    shard written, the trained quantizer, every rank's block of inverted lists, the finished index). The
    shards are hard-linked aside as they appear (the build deletes them when done) for ``measure``.
``cut`` / ``grow``
    When the time runs out: ``cut`` keeps the union to the shards already encoded (the build then resumes
    after them); ``grow --shards N`` extends the union to ``N`` shards of the same random order and links the
    shards already encoded where the next ``simulate`` finds them, so that it encodes only the new ones
    (``grow-N.json``; the report lists every growth and every later build in the order they ran).
``measure``
    At one size (a prefix of whole shards with at least ``--vectors`` vectors, 0: all): a flat index and an
    IVF index of those codes (quantizer trained, shards added, lists merged on disk: ``indexes.codes.ivf``'s
    functions, each stage timed; the largest size's IVF index is the one ``simulate`` built), then the
    union's queries searched query by query with :class:`indexes.codes.CodeRetriever` (default ``k'`` and
    ``rescore_depth``), flat and IVF at every ``--nprobe`` alternating, one thread. Per configuration:
    ms/query end to end (``search([query], 100)``: query encoding, kNN, pruning, exact MaxSim) and its
    stages, IVF's recall of the flat search's top 100 documents and of its ``k'`` neighbours per query
    token, bytes on disk per vector, resident memory while searching.
``report``
    The tables (Markdown and JSON).

    python benchmarks/code_real_scaling.py union --work /work/scratch/real-scaling
    python benchmarks/code_real_scaling.py estimate --work /work/scratch/real-scaling
    python benchmarks/code_real_scaling.py simulate --work /work/scratch/real-scaling --nproc 2 --ivf-nlist 4096
    python benchmarks/code_real_scaling.py measure --work /work/scratch/real-scaling --vectors 1000000
    python benchmarks/code_real_scaling.py report --work /work/scratch/real-scaling \\
        --output benchmarks/results/codes/real-scaling.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from code_real_scaling_build import estimate, simulate  # noqa: E402
from code_real_scaling_common import UNION, command_line, measure_file, now, write_json  # noqa: E402
from code_real_scaling_measure import measure  # noqa: E402
from code_real_scaling_report import render  # noqa: E402
from code_real_scaling_union import cut, grow, write_union  # noqa: E402
from common import publish  # noqa: E402


def main(argv=None) -> None:
    """Run one step (``argv``: the command line without the program name)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["union", "estimate", "simulate", "cut", "grow", "measure", "report"])
    parser.add_argument("--work", type=Path, required=True, help="folder of the union, the shards and the JSON")
    parser.add_argument("--queries-per", type=int, default=40, help="union: judged queries per collection")
    parser.add_argument("--max-docs", type=int, default=0, help="union: keep the first N documents of the order")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=2000, help="estimate: documents encoded")
    parser.add_argument("--nproc", type=int, default=2, help="simulate: processes")
    parser.add_argument("--ivf-nlist", type=int, default=0, help="simulate / measure: IVF lists (0: the default)")
    parser.add_argument("--shards", type=int, default=0, help="grow: shards of documents in the grown union")
    parser.add_argument("--simulate", default="simulate.json", help="simulate: its JSON; measure: the build's JSON")
    parser.add_argument("--vectors", type=int, default=0, help="measure: size (0: every shard)")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[4, 16, 64], help="measure: nprobe values")
    parser.add_argument("--max-queries", type=int, default=0, help="measure: first N queries (0: all)")
    parser.add_argument("--output", help="report: Markdown file (JSON beside it)")
    args = parser.parse_args(argv)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.step == "union":
        summary = write_union(work / UNION, args.queries_per, args.seed, args.max_docs)
        write_json(work / "union.json", {**summary, "command": command_line(), "date": now()})
    elif args.step == "estimate":
        write_json(work / "estimate.json", {**estimate(work, args.sample), "command": command_line()})
    elif args.step == "simulate":
        extra = ["--ivf-nlist", str(args.ivf_nlist)] if args.ivf_nlist else []
        write_json(work / args.simulate, {**simulate(work, args.nproc, extra), "runner": command_line()})
    elif args.step == "cut":
        write_json(work / "cut.json", {**cut(work, args.ivf_nlist, args.queries_per, args.seed), "command": command_line()})
    elif args.step == "grow":
        write_json(work / f"grow-{args.shards}.json", {**grow(work, args.shards, args.ivf_nlist, args.queries_per, args.seed),
                                         "command": command_line()})
    elif args.step == "measure":
        result = measure(work, args.vectors, args.ivf_nlist, args.nprobe, args.max_queries, args.seed, args.simulate)
        write_json(measure_file(work, args.vectors), {**result, "command": command_line()})
        print(json.dumps(result["rows"], indent=1))
    else:
        text, data = render(work, command_line())
        publish(text, args.output)
        if args.output:
            write_json(Path(args.output).with_suffix(".json"), data)


if __name__ == "__main__":
    main()
