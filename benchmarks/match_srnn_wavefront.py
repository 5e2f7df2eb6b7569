"""Speed of the wavefront spatial GRU against MatchZoo-py's SpatialGRU (its cell-by-cell loop), in one process.

    pip download --no-deps --no-binary :all: matchzoo-py==1.1.1 -d /tmp/anchors
    python benchmarks/match_srnn_wavefront.py --matchzoo /tmp/anchors/matchzoo-py-1.1.1.tar.gz \\
        [--shapes 10x40 20x100] [--hidden 10 50] [--batch 32] [--repeats 2] [--precisions fp32 bf16] \\
        [--output benchmarks/results/match-srnn/wavefront-speed.md] [--json ...wavefront-speed.json]

The anchor is ``matchzoo/modules/spatial_gru.py`` of the MatchZoo-py 1.1.1 source distribution, read from the
archive given by ``--matchzoo`` (or ``$MATCHZOO_SDIST``) and executed as it is, with only its import of
``matchzoo.utils.parse_activation`` answered here (``tanh`` and ``sigmoid``): MatchZoo-py's package imports
pins (pandas 0.24, ...) that cannot be installed beside this project, and its code is not copied into this
repository. Its ``forward`` loops over the ``M x N`` cells, each for the whole batch, and returns the state
at the padded corner ``h_MN``. It is given our :class:`rerankers.match_srnn.SpatialGRU`'s weights (same
layout: ``_wr``/``_wz`` are the reset and update rows of ``gates``, ``_w_ij`` is ``candidate_input``, ``_U``
is ``candidate_hidden``), and the script asserts that both give the same ``h_MN`` (to 1e-6 in float32)
before timing.

Our side is :meth:`SpatialGRU.corners`, what :class:`MatchSRNNModel` calls: the same ``h_MN``.

* ``fwd``: scoring, under ``torch.inference_mode`` on both sides.
* ``fwd+bwd``: a training step, forward and the backward of ``h_MN.sum()`` down to ``s`` and the weights.
* ``fp32``: float32. ``bf16``: both sides' forward (and loss) under ``torch.autocast("cpu",
  dtype=torch.bfloat16)``, the backward outside it as PyTorch recommends; the table also gives the ratio
  against the anchor's float32 time (from the fp32 row of the same run). On a CPU without bfloat16 matrix instructions
  (``pipeline.core.runtime.native_bf16()`` False) our recursion stays in float32 under autocast (see
  :class:`SpatialGRU`), while the anchor's products follow autocast: the bf16 ratio then measures what
  autocast costs a cell loop, not bfloat16 arithmetic, and the file says so.

Inputs are random rectified ``s [B, M, N, c]`` (c = 10 as in Sec. 6.1; NTN outputs are rectified). After one
warm-up of each (the runs whose outputs are compared), ours and the anchor are timed alternately ``--repeats`` times, so that a change of load on
the shared machine hits both; the table gives medians and their ratio, and the load average is recorded
at each shape. One torch thread (``--threads``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tarfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from pipeline.core.runtime import native_bf16  # noqa: E402
from rerankers.match_srnn import SpatialGRU  # noqa: E402

ANCHOR_MEMBER = "matchzoo/modules/spatial_gru.py"
DOWNLOAD_HINT = ("pip download --no-deps --no-binary :all: matchzoo-py==1.1.1 -d DIR, then pass "
                 "--matchzoo DIR/matchzoo-py-1.1.1.tar.gz")


class AnchorMissing(Exception):
    """The MatchZoo-py source is not where ``--matchzoo`` says."""


def anchor_source(path: str | os.PathLike) -> tuple[str, str]:
    """``(source, name)`` of MatchZoo-py's ``spatial_gru.py`` from an sdist archive, an unpacked tree or the file."""
    path = Path(path)
    if path.is_file() and path.suffix == ".py":
        return path.read_text(), str(path)
    if path.is_dir():
        found = sorted(path.rglob(ANCHOR_MEMBER))
        if not found:
            raise AnchorMissing(f"{path}: no {ANCHOR_MEMBER} below it; {DOWNLOAD_HINT}")
        return found[0].read_text(), str(found[0])
    if not path.is_file():
        raise AnchorMissing(f"{path}: no such file; {DOWNLOAD_HINT}")
    try:
        with tarfile.open(path) as archive:
            member = next((m for m in archive.getmembers() if m.name.endswith(ANCHOR_MEMBER)), None)
            if member is None:
                raise AnchorMissing(f"{path}: no {ANCHOR_MEMBER} in the archive; {DOWNLOAD_HINT}")
            return archive.extractfile(member).read().decode(), f"{path}:{member.name}"
    except tarfile.TarError as error:
        raise AnchorMissing(f"{path}: not a readable source archive ({error}); {DOWNLOAD_HINT}") from None


def load_anchor(path: str | os.PathLike) -> type:
    """MatchZoo-py's ``SpatialGRU`` class, executed from its source with a stand-in ``matchzoo.utils``."""
    source, name = anchor_source(path)
    utils = types.ModuleType("matchzoo.utils")
    utils.parse_activation = lambda activation: {"tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[activation]()
    package = types.ModuleType("matchzoo")
    package.utils = utils
    saved = {key: sys.modules.get(key) for key in ("matchzoo", "matchzoo.utils")}
    sys.modules.update({"matchzoo": package, "matchzoo.utils": utils})
    try:
        namespace = {"__name__": "matchzoo_spatial_gru"}
        exec(compile(source, name, "exec"), namespace)  # noqa: S102 (the anchor's own code, unmodified)
    finally:
        for key, module in saved.items():
            if module is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = module
    return namespace["SpatialGRU"]


def anchor_like(anchor_class: type, gru: SpatialGRU) -> nn.Module:
    """A MatchZoo-py SpatialGRU holding ``gru``'s weights."""
    d = gru.hidden_dim
    anchor = anchor_class(gru.input_dim, d)
    with torch.no_grad():
        anchor._wr.weight.copy_(gru.gates.weight[: 3 * d])
        anchor._wr.bias.copy_(gru.gates.bias[: 3 * d])
        anchor._wz.weight.copy_(gru.gates.weight[3 * d:])
        anchor._wz.bias.copy_(gru.gates.bias[3 * d:])
        anchor._w_ij.weight.copy_(gru.candidate_input.weight)
        anchor._w_ij.bias.copy_(gru.candidate_input.bias)
        anchor._U.weight.copy_(gru.candidate_hidden.weight)
    return anchor


def _run(function, s: torch.Tensor, mode: str, bf16: bool) -> torch.Tensor:
    """One timed unit. Autocast wraps the forward and the loss only; the backward runs outside it, as
    PyTorch recommends (under it, CPU backward products would be autocast too)."""
    if mode == "fwd":
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16), torch.inference_mode():
            return function(s)
    x = s.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = function(x)
        loss = out.float().sum()
    loss.backward()
    return out.detach()


def compare_shape(anchor_class: type, rows: int, cols: int, hidden: int, batch: int, mode: str, precision: str,
                  repeats: int, channels: int = 10, seed: int = 0) -> dict:
    """Median seconds of ours and the anchor in ``precision``, alternating, and their ratio.

    The first run of each side is the warm-up and gives the outputs compared: both in float32 first
    (asserted equal to 1e-6), then, for bf16, ours under autocast against the anchor in float32.
    """
    torch.manual_seed(seed)
    gru = SpatialGRU(channels, hidden)
    anchor = anchor_like(anchor_class, gru)
    s = torch.relu(torch.randn(batch, rows, cols, channels))
    lengths = torch.full((batch,), rows), torch.full((batch,), cols)

    def ours(x):
        return gru.corners(x, *lengths)

    def theirs(x):
        return anchor(x.permute(0, 3, 1, 2))

    bf16 = precision == "bf16"
    reference = _run(theirs, s, mode, False)
    exact = (_run(ours, s, mode, False) - reference).abs().max().item()
    assert exact < 1e-6, f"outputs differ by {exact} at {rows}x{cols}, hidden {hidden}"
    deviation = exact
    if bf16:  # warm-ups under autocast
        deviation = (_run(ours, s, mode, True).float() - reference).abs().max().item()
        _run(theirs, s, mode, True)
    sides = {"ours": ours, "anchor": theirs}
    times = {name: [] for name in sides}
    for _ in range(repeats):
        for name, function in sides.items():
            started = time.perf_counter()
            _run(function, s, mode, bf16)
            times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"shape": f"{rows}x{cols}", "hidden": hidden, "batch": batch, "mode": mode, "precision": precision,
            "ours_s": medians["ours"], "anchor_s": medians["anchor"], "ratio": medians["anchor"] / medians["ours"],
            "max_abs_diff_vs_anchor_fp32": deviation, "loadavg": os.getloadavg()[0]}


def measure(anchor_path, shapes=("10x40", "20x100"), hiddens=(10, 50), batch: int = 32, repeats: int = 2,
            precisions=("fp32", "bf16"), modes=("fwd", "fwd+bwd"), progress=None) -> list[dict]:
    """Every (precision, mode, hidden, shape) row of the table; ``progress(row)`` sees each as it is done.

    Raises:
        AnchorMissing: ``anchor_path`` holds no MatchZoo-py source.
    """
    anchor_class = load_anchor(anchor_path)
    rows = []
    for precision in precisions:
        for mode in modes:
            for hidden in hiddens:
                for shape in shapes:
                    m, n = (int(v) for v in shape.lower().split("x"))
                    rows.append(compare_shape(anchor_class, m, n, hidden, batch, mode, precision, repeats))
                    fp32 = [r for r in rows if r["precision"] == "fp32" and r["mode"] == mode
                            and r["hidden"] == hidden and r["shape"] == shape]
                    if precision == "bf16" and fp32:  # the anchor's float32 time of the same run
                        rows[-1]["anchor_fp32_s"] = fp32[0]["anchor_s"]
                        rows[-1]["ratio_vs_anchor_fp32"] = fp32[0]["anchor_s"] / rows[-1]["ours_s"]
                    if progress:
                        progress(rows[-1])
    return rows


def table(rows: list[dict]) -> list[str]:
    """Markdown rows of :func:`measure`'s results."""
    lines = ["| precision | pass | hidden d | query x doc tokens | wavefront (ms) | MatchZoo-py (ms) | ratio | "
             "MatchZoo-py fp32 (ms) | ratio vs its fp32 | max abs diff from the fp32 anchor | load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        fp32 = (f"{row['anchor_fp32_s'] * 1000:.0f} | {row['ratio_vs_anchor_fp32']:.2f}x" if "anchor_fp32_s" in row
                else "- | -")
        lines.append(f"| {row['precision']} | {row['mode']} | {row['hidden']} | {row['shape'].replace('x', ' x ')} | "
                     f"{row['ours_s'] * 1000:.1f} | {row['anchor_s'] * 1000:.0f} | **{row['ratio']:.2f}x** | {fp32} | "
                     f"{row['max_abs_diff_vs_anchor_fp32']:.1e} | {row['loadavg']:.1f} |")
    return lines


def minimum_ratios(rows: list[dict]) -> dict:
    """``{precision: min ratio over shapes and passes}``."""
    out = {}
    for row in rows:
        out[row["precision"]] = min(out.get(row["precision"], float("inf")), row["ratio"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matchzoo", default=os.environ.get("MATCHZOO_SDIST"),
                        help="MatchZoo-py 1.1.1 sdist (.tar.gz), unpacked tree or spatial_gru.py ($MATCHZOO_SDIST)")
    parser.add_argument("--shapes", nargs="+", default=["10x40", "20x100"], help="query x doc tokens, e.g. 10x40")
    parser.add_argument("--hidden", nargs="+", type=int, default=[10, 50], help="state sizes d")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each side, after one warm-up")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--output", help="also write the table to this Markdown file")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    if not args.matchzoo:
        print(f"error: --matchzoo is required (MatchZoo-py's source, the anchor): {DOWNLOAD_HINT}", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(args.threads)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    machine = (f"{platform.machine()}, {os.cpu_count()} cores (shared; load average at start {load}), "
               f"torch {torch.__version__} on {args.threads} thread(s), native bf16: {native_bf16()}")
    header = [f"# Match-SRNN spatial GRU: wavefront vs MatchZoo-py's SpatialGRU ({time.strftime('%Y-%m-%d %H:%M')}, "
              f"{machine})",
              "Command: `python benchmarks/match_srnn_wavefront.py " + " ".join(sys.argv[1:]) + "`",
              "",
              f"h_MN of one spatial GRU (c = 10, batch {args.batch}, random rectified s_ij, same weights and inputs) "
              f"computed by `SpatialGRU.corners` and by MatchZoo-py 1.1.1's `SpatialGRU.forward`; median of "
              f"{args.repeats} alternating runs after a warm-up; ratio = MatchZoo-py time / wavefront time. "
              "fwd: scoring under inference_mode; fwd+bwd: forward and backward down to s and the weights. "
              "bf16: both under CPU bfloat16 autocast" + ("" if native_bf16() else
              " -- this CPU has no bfloat16 matrix instructions, so the wavefront's recursion stays float32 under "
              "autocast while the anchor's products follow it; the ratio against the anchor's float32 is given "
              "beside") + ". Outputs in float32 agree to 1e-6 (asserted).",
              "", *table([])]
    print("\n".join(header), flush=True)
    try:
        rows = measure(args.matchzoo, args.shapes, args.hidden, args.batch, args.repeats, args.precisions,
                       progress=lambda row: print(table([row])[-1], flush=True))
    except AnchorMissing as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    minima = minimum_ratios(rows)
    lines = [*header[:-2], *table(rows), "",
             "Smallest ratio over every shape and pass: " + ", ".join(f"{k} {v:.2f}x" for k, v in minima.items())]
    print(lines[-1])
    from pipeline.core.atomic import write_text

    if args.output:
        write_text(args.output, "\n".join(lines) + "\n")
    if args.json:
        write_text(args.json, json.dumps({"command": "python benchmarks/match_srnn_wavefront.py "
                                          + " ".join(sys.argv[1:]), "date": time.strftime("%Y-%m-%d %H:%M"),
                                          "machine": machine, "native_bf16": native_bf16(), "rows": rows,
                                          "min_ratio": minima}, indent=1) + "\n")


if __name__ == "__main__":
    main()
