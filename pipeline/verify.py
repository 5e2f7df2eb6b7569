"""Read every cache entry or exported model whole and check it against the checksums written with it.

Command line::

    python -m pipeline.verify                  # every entry under the home: Lucene and code indexes, models
    python -m pipeline.verify PATH [PATH ...]  # these: an index directory, a checkpoint (.pt), an export

Opening an entry checks its content already (see RELIABILITY.md, "Content checks"), except for entries larger
than ``PIPELINE_VERIFY_MAX_BYTES`` (default 2 GiB), which are read whole once and then trusted while their
files' sizes, modification and change times stay as they were. This command reads them whole now, whatever
their size: Lucene indexes through Lucene's own CRC32 footers (``CodecUtil.checksumEntireFile``) and their
document count, code indexes through the SHA-256 of every file their build recorded (and their encoder's
checkpoint digest), checkpoints and training states through their SHA-256, Hugging Face exports through
``neural_rerank_checksums.json``.

Prints one line per entry, ``ok`` or ``DAMAGED`` with the reason and the command that clears it; exits 0 when
every entry is whole, 2 when one is damaged or a path is no entry (one ``error:`` line), 1 when a file cannot
be read (an OS error).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

from .engine.cli_options import OptionParser
from .core.errors import PipelineError
from .core.home import index_root, model_root
from .shell import run_command

LUCENE_META = "pipeline-index.json"
CODE_META = "code-index.json"


def entry_kind(path: Path) -> str | None:
    """What ``path`` is: ``lucene``, ``codes``, ``checkpoint``, ``export``, or ``None`` (not an entry)."""
    from rerankers.hf_export import CHECKSUM_FILE, CONFIG_FILES

    if path.is_file():
        return "checkpoint" if path.suffix == ".pt" else None
    if (path / LUCENE_META).is_file():
        return "lucene"
    if (path / CODE_META).is_file():
        return "codes"
    if any((path / name).is_file() for name in (CHECKSUM_FILE, *CONFIG_FILES)):
        return "export"
    return None


def cached_entries() -> Iterator[Path]:
    """Every entry under the home's index and model caches (an index's own files are not listed again)."""
    roots = dict.fromkeys([index_root("lucene"), index_root("codes"), model_root()])
    for root in roots:
        if not root.is_dir():
            continue
        pending = [root]
        while pending:
            folder = pending.pop()
            for child in sorted(folder.iterdir()):
                if child.name.startswith("."):  # lock files and temporary siblings
                    continue
                kind = entry_kind(child)
                if kind == "codes":
                    yield child
                    encoder = child / "encoder.pt"
                    if encoder.is_file():
                        yield encoder
                elif kind is not None:
                    yield child
                elif child.is_dir():
                    pending.append(child)


def verify_entry(path: Path) -> str:
    """Read entry ``path`` whole and check it; returns what it is. A damaged entry raises the
    :class:`~pipeline.core.errors.PipelineError` (``CorruptCacheError`` / ``CheckpointError``) naming it."""
    kind = entry_kind(path)
    if kind == "lucene":
        from indexes.lucene import CHECKSUM_FILE, index_metadata
        from indexes.lucene_check import check_index
        from pipeline.core import filecheck

        metadata = index_metadata(path)
        filecheck.check_manifest(path, CHECKSUM_FILE, "Lucene index", full=True)
        check_index(path, metadata.get("indexed", metadata.get("documents")), full=True)
    elif kind == "codes":
        from pipeline.core import filecheck

        from indexes.codes import VERIFIED_STAMP, index_metadata as code_metadata

        recorded = code_metadata(path).get("files")
        if not recorded:
            raise PipelineError(f"{path}: a code index built before file digests were recorded: it cannot be "
                                f"verified; delete it to rebuild it: rm -rf '{path}'")
        filecheck.check(path, recorded, VERIFIED_STAMP, "code index", full=True)
    elif kind == "checkpoint":
        from infra.checkpoints import DIGEST_KEY, load_checkpoint

        if DIGEST_KEY not in load_checkpoint(path):
            raise PipelineError(f"{path}: written before checkpoints carried a SHA-256: it cannot be verified")
    elif kind == "export":
        from rerankers.hf_export import CHECKSUM_FILE, verify_export

        if not (path / CHECKSUM_FILE).is_file():
            raise PipelineError(f"{path}: no {CHECKSUM_FILE} (exported before checksums were written): it "
                                f"cannot be verified; export it again")
        verify_export(path, full=True)
    else:
        raise PipelineError(f"{path}: neither a Lucene or code index, a checkpoint (.pt) nor a Hugging Face "
                            f"export of this project")
    return kind


def size_of(path: Path) -> int:
    """Bytes of the file ``path`` or of every file under the directory ``path``."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = OptionParser(prog="python -m pipeline.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="index directories, checkpoints or exports (default: every cached entry)")

    def work() -> int:
        args = parser.parse_args(argv)
        for path in args.paths:
            if not path.exists():
                raise PipelineError(f"{path}: no such file or directory")
            if entry_kind(path) is None:
                raise PipelineError(f"{path}: neither a Lucene or code index, a checkpoint (.pt) nor a Hugging "
                                    f"Face export of this project")
        paths = list(args.paths) or list(cached_entries())
        if not paths:
            print("no cached entries to verify")
            return 0
        damaged = 0
        started_all = time.perf_counter()
        total = 0
        for path in paths:
            started = time.perf_counter()
            try:
                size = size_of(path)
                kind = verify_entry(path)
            except PipelineError as error:  # a damaged entry is reported and the others are still checked
                damaged += 1
                print(f"DAMAGED {path}: {error}", flush=True)
                continue
            except OSError as error:
                print(f"error: cannot read {error.filename or path}: {error.strerror or error}", file=sys.stderr)
                return 1
            total += size
            print(f"ok {path} ({kind}, {size / 1e6:.1f} MB, {time.perf_counter() - started:.2f} s)", flush=True)
        print(f"{len(paths) - damaged} of {len(paths)} entries whole ({total / 1e6:.1f} MB read in "
              f"{time.perf_counter() - started_all:.1f} s)" + (f"; {damaged} damaged" if damaged else ""))
        return 2 if damaged else 0

    return run_command(work)


if __name__ == "__main__":
    sys.exit(main())
