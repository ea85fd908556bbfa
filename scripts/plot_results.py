#!/usr/bin/env python3
"""Draw the PNGs of bench/results/latest/ from its CSVs.

One PNG a layout at 16 heads: µs a layer against T (log axes), one colour
a width; this library in the shared mode (solid) and the distinct mode
(dash-dot), the gather of the same rows timed in the same run (dashed,
dotted), and the peers of bench/results/peers.csv (markers only). And one
PNG a layout for 64 and 128 heads at width 640, one colour a head count,
with FlashMLA at its native head count. Writes
bench/results/latest/{plain,plain_heads,plain_bf16,packed,packed_heads,hca,dsa}.png
(a plot without rows is skipped).

    python3 -m pip install matplotlib     # in a virtual environment
    python3 scripts/plot_results.py [--out DIR]

The CSVs are read by scripts/readme_tables.py's loader, so the plots show
the rows of the README's tables.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import readme_tables as tables  # noqa: E402

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    raise SystemExit("plot_results: needs matplotlib (python3 -m pip install matplotlib)")

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
PEER_MARKERS = {"pytorch": "x", "vllm_triton": "^", "flashmla_pad64": "s", "flashmla": "s"}
PEER_NAMES = {"pytorch": "PyTorch", "vllm_triton": "vLLM Triton", "flashmla_pad64": "FlashMLA (64-head pad)",
              "flashmla": "FlashMLA"}
HEADS_WIDTH = 640  # the width of the head-count plots

# (label, series, "us" | "gather", line style)
Line = Tuple[str, Optional[tables.Series], str, str]


def by_width(series: tables.Series) -> Dict[int, List[tables.Row]]:
    widths: Dict[int, List[tables.Row]] = {}
    for row in series.rows.values():
        widths.setdefault(row.width, []).append(row)
    for rows in widths.values():
        rows.sort(key=lambda r: r.tokens)
    return widths


def finish(fig, ax, title: str, out: Path) -> Path:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("T (query tokens a call)")
    ax.set_ylabel("µs a layer")
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def plot(out: Path, title: str, lines: List[Line], peers: List[Tuple[str, str]], all_peers,
         width_label: str = "width") -> Optional[Path]:
    """16 heads; peers: (peer, rows) keys of peers.csv at 16 heads."""
    drawn = [l for l in lines if l[1]]
    if not drawn:
        return None
    widths: List[int] = []
    for _, series, _, _ in drawn:
        widths += [w for w in by_width(series) if w not in widths]
    colour = {w: COLOURS[i % len(COLOURS)] for i, w in enumerate(widths)}
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    # One width: a colour a line, else a colour a width (the line style tells the lines apart).
    one_width = len(widths) == 1
    for i, (label, series, field, style) in enumerate(drawn):
        for width, rows in by_width(series).items():
            x = [r.tokens for r in rows]
            y = [r.us if field == "us" else r.gather_us for r in rows]
            ax.plot(x, y, linestyle=style, marker="o" if field == "us" else None, markersize=4,
                    color=COLOURS[i // 2 % len(COLOURS)] if one_width else colour[width],
                    label=f"{label}, {width_label} {width}")
    for peer, rows_kind in peers:
        points = all_peers.get((peer, rows_kind, tables.HEADS), {})
        for width in widths:
            shape_points = sorted((t, v) for (t, w), v in points.items() if w == width)
            if shape_points:
                ax.plot([p[0] for p in shape_points], [p[1] for p in shape_points], linestyle="none",
                        marker=PEER_MARKERS[peer], color=colour[width], markersize=7, markerfacecolor="none",
                        label=f"{PEER_NAMES[peer]}, {width_label} {width}")
    return finish(fig, ax, title, out)


def plot_heads(out: Path, title: str, found, name: str, all_peers) -> Optional[Path]:
    """64 and 128 heads at HEADS_WIDTH: both modes a head count, FlashMLA at its native head count."""
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    drawn = False
    for i, heads in enumerate(tables.OTHER_HEADS):
        colour = COLOURS[i % len(COLOURS)]
        for mode, style in (("shared", "-"), ("distinct", "-.")):
            series = found.get((name, False, mode, heads))
            rows = sorted((r for r in series.rows.values() if r.width == HEADS_WIDTH), key=lambda r: r.tokens) \
                if series else []
            if rows:
                ax.plot([r.tokens for r in rows], [r.us for r in rows], linestyle=style, marker="o", markersize=4,
                        color=colour, label=f"this library, {mode}, {heads} heads")
                drawn = True
        points = sorted((t, v) for (t, w), v in all_peers.get(("flashmla", "packed", heads), {}).items()
                        if w == HEADS_WIDTH)
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="none", marker="s", color=colour,
                    markersize=7, markerfacecolor="none", label=f"FlashMLA, {heads} heads")
    if not drawn:
        plt.close(fig)
        return None
    return finish(fig, ax, title, out)


def modes_lines(found, name: str, label: str = "this library") -> List[Line]:
    get = found.get
    return [(f"{label}, shared", get((name, False, "shared", tables.HEADS)), "us", "-"),
            (f"{label}, distinct", get((name, False, "distinct", tables.HEADS)), "us", "-."),
            ("gather, shared", get((name, False, "shared", tables.HEADS)), "gather", "--"),
            ("gather, distinct", get((name, False, "distinct", tables.HEADS)), "gather", ":")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=tables.LATEST, help="folder of the PNGs (default: latest/)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    found = tables.load_results()
    peers = tables.load_peers()
    get = found.get
    h = tables.HEADS
    made = [
        plot(args.out / "plain.png", f"dsv4_decode, FP8 plain rows, {h} heads (H200)", modes_lines(found, "plain"),
             [("pytorch", "plain"), ("flashmla_pad64", "packed")], peers),
        plot_heads(args.out / "plain_heads.png", f"dsv4_decode, FP8 plain rows, 64 and 128 heads, width {HEADS_WIDTH} "
                   "(H200)", found, "plain", peers),
        plot(args.out / "plain_bf16.png", f"dsv4_decode, BF16 plain rows, {h} heads (H200)",
             modes_lines(found, "plain_bf16"), [], peers),
        plot(args.out / "packed.png", f"dsv4_decode_packed, 584-byte rows, {h} heads (H200)",
             modes_lines(found, "packed"), [("flashmla_pad64", "packed"), ("vllm_triton", "packed")], peers),
        plot_heads(args.out / "packed_heads.png", f"dsv4_decode_packed, 584-byte rows, 64 and 128 heads, width "
                   f"{HEADS_WIDTH} (H200)", found, "packed", peers),
        plot(args.out / "hca.png", f"dsv4_decode_hca, FP8, top-k as pages of 64 rows, {h} heads (H200)",
             modes_lines(found, "hca", "dsv4_decode_hca")
             + [("dsv4_decode, same rows, shared", get(("hca_plain", False, "shared", h)), "us", (0, (1, 1))),
                ("dsv4_decode, same rows, distinct", get(("hca_plain", False, "distinct", h)), "us", (0, (3, 1, 1, 1))),
                ("dsv4_decode on the expansion, distinct", get(("hca_expansion", False, "distinct", h)), "us",
                 (0, (5, 2)))],
             [], peers),
        plot(args.out / "dsa.png", f"dsa_decode, G = 1, {h} heads, 16 regions of 64 keys, distinct mode (H200)",
             [("FP8 cache", get(("dsa_fp8", False, "distinct", h)), "us", "-"),
              ("FP8 gather", get(("dsa_fp8", False, "distinct", h)), "gather", "--"),
              ("BF16 cache", get(("dsa_bf16", False, "distinct", h)), "us", "-."),
              ("BF16 gather", get(("dsa_bf16", False, "distinct", h)), "gather", ":")], [], peers, width_label="keys"),
    ]
    for path in made:
        if path:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
