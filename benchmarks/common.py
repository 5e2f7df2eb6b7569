"""What the benchmark scripts share: where a report goes, the machine and load it was measured on, threads.

Scripts import it as ``from common import ...`` (``benchmarks/`` is not a package: each script puts its own
folder on ``sys.path``).

Example::

    from common import load_average, publish, set_all_threads

    set_all_threads(1)
    publish(f"# Speed (load {' '.join(load_average())})\\n...", args.output)
"""
from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


def publish(text: str, output: str | Path | None, data: dict | None = None) -> None:
    """Print a benchmark's Markdown and, with ``output``, write it there atomically (with a final newline),
    and ``data`` as JSON beside it (``output`` with the suffix ``.json``).

    Args:
        text: the report, without its final newline.
        output: the file to write, or ``None`` to print only.
        data: the numbers behind the report, or ``None``.

    Example:
        >>> publish("| a |", None)
        | a |
    """
    print(text)
    if output:
        import json

        from pipeline.core.atomic import write_text

        write_text(output, text + "\n")
        if data is not None:
            write_text(Path(output).with_suffix(".json"), json.dumps(data, indent=1) + "\n")


def load_average() -> list[str]:
    """The 1, 5 and 15 minute load averages, as ``/proc/loadavg`` writes them.

    Returns:
        Three strings, e.g. ``["0.52", "0.61", "0.70"]``.

    Example:
        >>> len(load_average())  # doctest: +SKIP
        3
    """
    return Path("/proc/loadavg").read_text().split()[:3]


def machine_line(threads: int) -> str:
    """The machine a benchmark ran on, for its header.

    Args:
        threads: the torch / faiss threads the benchmark used.

    Returns:
        e.g. ``"x86_64, 2 cores, 1 threads, Python 3.11.7"``.

    Example:
        >>> machine_line(1).split(", ")[2]
        '1 threads'
    """
    return f"{platform.machine()}, {os.cpu_count()} cores, {threads} threads, Python {platform.python_version()}"


def set_all_threads(threads: int) -> None:
    """Use ``threads`` threads in torch and in faiss (the code first stages search with faiss).

    Args:
        threads: how many threads each library may use.

    Example:
        >>> set_all_threads(1)  # doctest: +SKIP
    """
    from pipeline.core.runtime import set_threads

    set_threads(threads)
    import faiss

    faiss.omp_set_num_threads(threads)


def add_search_arguments(parser: argparse.ArgumentParser, threads: int) -> None:
    """The options of the scripts that search code / float token indexes: ``--threads``, ``--k-prime``,
    ``--max-queries`` and ``--quiet``.

    Args:
        parser: the script's parser.
        threads: the default of ``--threads``.

    Example:
        >>> parser = argparse.ArgumentParser()
        >>> add_search_arguments(parser, threads=1)
        >>> parser.parse_args([]).k_prime
        256
    """
    parser.add_argument("--threads", type=int, default=threads,
                        help=f"torch / faiss / Lucene threads (default {threads})")
    parser.add_argument("--k-prime", type=int, default=256, help="neighbours per query token (default 256)")
    parser.add_argument("--max-queries", type=int, help="smoke test: only each dataset's first N queries")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
