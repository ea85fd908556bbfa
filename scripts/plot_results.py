#!/usr/bin/env python3
"""Draw one PNG per layout from bench/results/latest/*.csv.

µs a layer against T (log axes), one colour a width: this library (solid),
the gather of the same rows timed in the same run (dashed), and the peers
of bench/results/peers.csv (markers only). Writes
bench/results/latest/{plain,plain_bf16,packed,hca,dsa}.png (a layout
without rows is skipped).

    python3 -m pip install matplotlib     # in a virtual environment
    python3 scripts/plot_results.py

The CSVs are read by scripts/readme_tables.py's loader, so the plots show
the rows of the README's tables.
"""
from __future__ import annotations

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
PEER_MARKERS = {"pytorch": "x", "vllm_triton": "^", "flashmla_pad64": "s"}
PEER_NAMES = {"pytorch": "PyTorch", "vllm_triton": "vLLM Triton", "flashmla_pad64": "FlashMLA (64-head pad)"}



def by_width(series: tables.Series) -> Dict[int, List[tables.Row]]:
    widths: Dict[int, List[tables.Row]] = {}
    for row in series.rows.values():
        widths.setdefault(row.width, []).append(row)
    for rows in widths.values():
        rows.sort(key=lambda r: r.tokens)
    return widths


def plot(name: str, title: str, lines: List[Tuple[str, Optional[tables.Series], str, str]],
         peers: List[Tuple[str, str]], all_peers, width_label: str = "width") -> Optional[Path]:
    """lines: (label, series, "us" | "gather", linestyle); peers: (peer, rows) keys of peers.csv."""
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
        points = all_peers.get((peer, rows_kind), {})
        for width in widths:
            shape_points = sorted((t, v) for (t, w), v in points.items() if w == width)
            if shape_points:
                ax.plot([p[0] for p in shape_points], [p[1] for p in shape_points], linestyle="none",
                        marker=PEER_MARKERS[peer], color=colour[width], markersize=7, markerfacecolor="none",
                        label=f"{PEER_NAMES[peer]}, {width_label} {width}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("T (query tokens a call)")
    ax.set_ylabel("µs a layer")
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    out = tables.LATEST / f"{name}.png"
    fig.savefig(out)
    plt.close(fig)
    return out


def main() -> int:
    found = tables.load_results()
    peers = tables.load_peers()
    get = found.get
    made = [
        plot("plain", "dsv4_decode, FP8 plain rows, 16 heads (H200)",
             [("this library", get(("plain", False)), "us", "-"),
              ("this library + PDL", get(("plain", True)), "us", ":"),
              ("gather", get(("plain", False)), "gather", "--")],
             [("pytorch", "plain"), ("flashmla_pad64", "packed")], peers),
        plot("plain_bf16", "dsv4_decode, BF16 plain rows, 16 heads (H200)",
             [("this library", get(("plain_bf16", False)), "us", "-"),
              ("gather", get(("plain_bf16", False)), "gather", "--")], [], peers),
        plot("packed", "dsv4_decode_packed, 584-byte rows, 16 heads (H200)",
             [("this library", get(("packed", False)), "us", "-"),
              ("this library + PDL", get(("packed", True)), "us", ":"),
              ("gather", get(("packed", False)), "gather", "--")],
             [("flashmla_pad64", "packed"), ("vllm_triton", "packed")], peers),
        plot("hca", "dsv4_decode_hca, FP8, top-k as pages of 64 rows, 16 heads (H200)",
             [("dsv4_decode_hca", get(("hca", False)), "us", "-"),
              ("dsv4_decode, same rows", get(("hca_plain", False)), "us", "-."),
              ("gather", get(("hca", False)), "gather", "--")], [], peers),
        plot("dsa", "dsa_decode, G = 1, 16 heads, 16 regions of 64 keys (H200)",
             [("FP8 cache", get(("dsa_fp8", False)), "us", "-"),
              ("FP8 gather", get(("dsa_fp8", False)), "gather", "--"),
              ("BF16 cache", get(("dsa_bf16", False)), "us", "-."),
              ("BF16 gather", get(("dsa_bf16", False)), "gather", ":")], [], peers, width_label="keys"),
    ]
    for path in made:
        if path:
            print(f"wrote {path.relative_to(tables.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
