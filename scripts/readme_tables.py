#!/usr/bin/env python3
"""Rewrite README.md's performance tables from bench/results/latest/*.csv.

Reads every CSV that `sparse-decode bench --csv FILE` writes (any layout:
plain, packed, hca, dsa; with or without --pdl, FP8 or BF16) from
bench/results/latest/, joins bench/results/peers.csv by (T, width), and
replaces the lines between `<!-- tables:begin -->` and `<!-- tables:end -->`
of README.md with one table per layout.

    python3 scripts/readme_tables.py          # rewrite README.md in place
    python3 scripts/readme_tables.py --check  # exit 1 when README.md is out of date
    python3 scripts/readme_tables.py --print  # print the block only
    python3 scripts/readme_tables.py --print --table plain_bf16  # one table (plain, plain_bf16, packed, hca, dsa)

Only the standard library is used. scripts/plot_results.py draws the same
series.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / "bench" / "results" / "latest"
PEERS = ROOT / "bench" / "results" / "peers.csv"
README = ROOT / "README.md"
BEGIN = "<!-- tables:begin -->"
END = "<!-- tables:end -->"
HEADS = 16  # the tables show 16-head rows; other head counts stay in the CSVs

Shape = Tuple[int, int]  # (T, width)


@dataclass
class Row:
    """One CSV row of `sparse-decode bench` (columns: bench/results/README.md)."""

    file: str
    kernel: str
    path: str
    tokens: int
    width: int
    heads: int
    us: float
    gather_us: float
    splits: Optional[int] = None


@dataclass
class Series:
    """The rows of one layout, dtype and launch mode, one a shape, in CSV order."""

    rows: Dict[Shape, Row] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)

    def shapes(self) -> List[Shape]:
        return list(self.rows)


def series_key(row: Row, hca_file: bool, pdl_file: bool) -> Tuple[str, bool]:
    """(series name, pdl) of a row: plain, plain_bf16, packed, hca, hca_plain, dsa_fp8, dsa_bf16."""
    pdl = row.path.endswith("+pdl") or pdl_file
    kernel = row.kernel
    if kernel == "dsv4_decode":
        return ("hca_plain" if hca_file else "plain"), pdl
    names = {
        "dsv4_decode_bf16": "plain_bf16",
        "dsv4_decode_packed": "packed",
        "dsv4_decode_hca": "hca",
        "dsa_decode": "dsa_fp8",
        "dsa_decode_bf16": "dsa_bf16",
    }
    if kernel not in names:
        raise SystemExit(f"readme_tables: unknown kernel '{kernel}' in {row.file}")
    return names[kernel], pdl


def load_results(folder: Path = LATEST) -> Dict[Tuple[str, bool], Series]:
    """Every CSV of `folder`, grouped by (series name, pdl); 16-head rows only.

    Where a file holds several rows of one shape (`bench --kernel all`), the
    row of kAuto (path `auto:...`) is kept, else the first one.
    """
    found: Dict[Tuple[str, bool], Series] = {}
    for path in sorted(folder.glob("*.csv")):
        with open(path, newline="") as f:
            records = list(csv.DictReader(f))
        hca_file = any(r["kernel"] == "dsv4_decode_hca" for r in records)
        pdl_file = "pdl" in path.stem.split("_")
        for r in records:
            row = Row(
                file=path.name,
                kernel=r["kernel"],
                path=r["path"],
                tokens=int(r["tokens"]),
                width=int(r["width"]),
                heads=int(r["heads"]),
                us=float(r["us_per_layer"]),
                gather_us=float(r["gather_us"]),
                splits=int(r["splits"]) if r.get("splits") else None,
            )
            if row.heads != HEADS:
                continue
            series = found.setdefault(series_key(row, hca_file, pdl_file), Series())
            if path.name not in series.files:
                series.files.append(path.name)
            shape = (row.tokens, row.width)
            kept = series.rows.get(shape)
            if kept is None or (not kept.path.startswith("auto") and row.path.startswith("auto")):
                series.rows[shape] = row
    return found


def load_peers(path: Path = PEERS) -> Dict[Tuple[str, str], Dict[Shape, float]]:
    """peers.csv as {(peer, rows): {(T, width): µs}} for 16 heads."""
    peers: Dict[Tuple[str, str], Dict[Shape, float]] = {}
    if not path.exists():
        return peers
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if int(r["heads"]) != HEADS:
                continue
            peers.setdefault((r["peer"], r["rows"]), {})[(int(r["tokens"]), int(r["width"]))] = float(r["us_per_layer"])
    return peers


def us(value: Optional[float]) -> str:
    if value is None:
        return ""
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.1f}x" if a and b else ""


def kernel_label(path: str) -> str:
    """The kernel a plain row ran: `auto:split` -> split; a forced one is marked."""
    if path.startswith("auto:"):
        return path[len("auto:"):]
    return f"{path} (forced)"


def table(header: List[str], lines: List[List[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def files_of(*series: Optional[Series]) -> str:
    names = [n for s in series if s for n in s.files]
    return ", ".join(f"`{n}`" for n in names)


def plain_table(found, peers) -> List[str]:
    fp8 = found.get(("plain", False))
    if not fp8:
        return []
    pdl = found.get(("plain", True))
    torch = peers.get(("pytorch", "plain"), {})
    flashmla = peers.get(("flashmla_pad64", "packed"), {})
    ours_peers_run = peers.get(("sparse_decode", "plain"), {})
    lines = []
    for shape, r in fp8.rows.items():
        with_pdl = pdl.rows.get(shape) if pdl else None
        lines.append([str(r.tokens), str(r.width), us(r.us), us(with_pdl.us) if with_pdl else "",
                      kernel_label(r.path), us(r.gather_us), ratio(r.us, r.gather_us),
                      us(torch.get(shape)), us(flashmla.get(shape)),
                      ratio(flashmla.get(shape), ours_peers_run.get(shape))])
    head = ["T", "width", "µs", "µs, PDL", "kernel", "gather µs", "÷ gather", "PyTorch",
            "FlashMLA (64-head pad)", "FlashMLA ÷ this, peers' run"]
    return ([f"**`dsv4_decode`, FP8 plain rows** ({files_of(fp8, pdl)})", ""] + table(head, lines))


def plain_bf16_table(found, peers) -> List[str]:
    bf16 = found.get(("plain_bf16", False))
    if not bf16:
        return []
    lines = [[str(r.tokens), str(r.width), us(r.us), kernel_label(r.path), us(r.gather_us),
              ratio(r.us, r.gather_us)] for r in bf16.rows.values()]
    head = ["T", "width", "µs", "kernel", "gather µs", "÷ gather"]
    return [f"**`dsv4_decode`, BF16 plain rows** ({files_of(bf16)})", ""] + table(head, lines)


def packed_table(found, peers) -> List[str]:
    packed = found.get(("packed", False))
    if not packed:
        return []
    pdl = found.get(("packed", True))
    flashmla = peers.get(("flashmla_pad64", "packed"), {})
    triton = peers.get(("vllm_triton", "packed"), {})
    ours_peers_run = peers.get(("sparse_decode", "packed"), {})
    lines = []
    for shape, r in packed.rows.items():
        with_pdl = pdl.rows.get(shape) if pdl else None
        lines.append([str(r.tokens), str(r.width), us(r.us), us(with_pdl.us) if with_pdl else "",
                      us(r.gather_us), ratio(r.us, r.gather_us), us(flashmla.get(shape)), us(triton.get(shape)),
                      ratio(flashmla.get(shape), ours_peers_run.get(shape))])
    head = ["T", "width", "µs", "µs, PDL", "gather µs", "÷ gather", "FlashMLA (64-head pad)", "vLLM Triton",
            "FlashMLA ÷ this, peers' run"]
    return [f"**`dsv4_decode_packed`, 584-byte rows** ({files_of(packed, pdl)})", ""] + table(head, lines)


def hca_table(found, peers) -> List[str]:
    hca = found.get(("hca", False))
    if not hca:
        return []
    plain = found.get(("hca_plain", False))
    lines = []
    for shape, r in hca.rows.items():
        same = plain.rows.get(shape) if plain else None
        lines.append([str(r.tokens), str(r.width), us(r.us), us(same.us) if same else "",
                      f"+{r.us - same.us:.1f}" if same else "", us(r.gather_us), ratio(r.us, r.gather_us)])
    head = ["T", "width", "µs", "`dsv4_decode`, same rows", "difference", "gather µs", "÷ gather"]
    return [f"**`dsv4_decode_hca`, FP8, top-k as whole pages of 64 rows** ({files_of(hca)})", ""] + table(head, lines)


def dsa_table(found, peers) -> List[str]:
    fp8 = found.get(("dsa_fp8", False))
    bf16 = found.get(("dsa_bf16", False))
    first = fp8 or bf16
    if not first:
        return []
    shapes = list(first.rows) + [s for s in (bf16.rows if bf16 and fp8 else {}) if s not in first.rows]
    lines = []
    for shape in shapes:
        a = fp8.rows.get(shape) if fp8 else None
        b = bf16.rows.get(shape) if bf16 else None
        any_row = a or b
        lines.append([str(shape[0]), str(shape[1]), str(any_row.splits or ""),
                      us(a.us) if a else "", us(a.gather_us) if a else "", ratio(a.us, a.gather_us) if a else "",
                      us(b.us) if b else "", us(b.gather_us) if b else "", ratio(b.us, b.gather_us) if b else ""])
    head = ["T", "keys a row", "splits", "FP8 µs", "FP8 gather µs", "FP8 ÷ gather", "BF16 µs", "BF16 gather µs",
            "BF16 ÷ gather"]
    return [f"**`dsa_decode`, G = 1, 16 heads, block 64, 16 regions** ({files_of(fp8, bf16)})", ""] + table(head, lines)


ALL_TABLES = {
    "plain": plain_table,
    "plain_bf16": plain_bf16_table,
    "packed": packed_table,
    "hca": hca_table,
    "dsa": dsa_table,
}
# The README's tables, one a layout; BF16 plain rows are printed with
# `--print --table plain_bf16` (docs/kernels/bf16.md) and drawn by plot_results.py.
README_TABLES = ["plain", "packed", "hca", "dsa"]


def block(names: List[str] = README_TABLES, folder: Path = LATEST) -> List[str]:
    found = load_results(folder)
    peers = load_peers()
    out = [BEGIN,
           "<!-- generated by scripts/readme_tables.py from bench/results/latest/*.csv and "
           "bench/results/peers.csv: edit those, not this block -->"]
    for name in names:
        lines = ALL_TABLES[name](found, peers)
        if lines:
            out += [""] + lines
    out += ["", END]
    return out


def rewrite(text: str, new_block: List[str]) -> str:
    lines = text.split("\n")
    try:
        start = lines.index(BEGIN)
        stop = lines.index(END, start)
    except ValueError:
        raise SystemExit(f"readme_tables: README.md needs a line '{BEGIN}' and a later line '{END}'")
    return "\n".join(lines[:start] + new_block + lines[stop + 1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md's block is out of date")
    mode.add_argument("--print", action="store_true", help="print the block instead of rewriting README.md")
    parser.add_argument("--table", choices=sorted(ALL_TABLES), action="append",
                        help="with --print: only this table (repeatable)")
    args = parser.parse_args()
    if args.table and not args.print:
        parser.error("--table goes with --print")
    if args.print:
        print("\n".join(block(args.table or README_TABLES)[2:-1]).strip("\n") if args.table
              else "\n".join(block()))
        return 0
    new_block = block()
    text = README.read_text()
    updated = rewrite(text, new_block)
    if args.check:
        if updated != text:
            print("README.md: the performance tables differ from bench/results/latest/ "
                  "(run scripts/readme_tables.py)", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        README.write_text(updated)
        print("README.md: tables rewritten")
    else:
        print("README.md: tables already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
