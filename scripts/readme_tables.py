#!/usr/bin/env python3
"""Rewrite the performance tables of README.md and docs/performance.md from bench/results/latest/.

Reads every CSV that `sparse-decode bench --csv FILE` writes (any layout:
plain, packed, hca, dsa; with or without --pdl, FP8 or BF16; both input
modes) from bench/results/latest/, joins bench/results/peers.csv by (heads,
T, width), and replaces the lines between `<!-- tables:begin -->` and
`<!-- tables:end -->` of README.md with a 16-head table of both modes per
layout and the merge's table (latest/merge/), and those of
docs/performance.md with the tables of the other head counts (64 and 128:
FlashMLA at its native head count) and of BF16 rows. A column without a
value in any row is left out.

    python3 scripts/readme_tables.py          # rewrite both files in place
    python3 scripts/readme_tables.py --check  # exit 1 when either is out of date
    python3 scripts/readme_tables.py --print  # print README.md's block only
    python3 scripts/readme_tables.py --print --table plain_bf16  # one table (see --help for the names)

A CSV without the `mode` column predates it: its rows are of the shared
mode, except DSA's, which were of the distinct one. Only the standard
library is used. scripts/plot_results.py draws the same series.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
LATEST = ROOT / "bench" / "results" / "latest"
PEERS = ROOT / "bench" / "results" / "peers.csv"
README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- tables:begin -->"
END = "<!-- tables:end -->"
HEADS = 16  # the main table's head count
OTHER_HEADS = (64, 128)  # the second table's, where FlashMLA runs natively
MODES = ("shared", "distinct")

Shape = Tuple[int, int]  # (T, width)
Key = Tuple[str, bool, str, int]  # (series name, pdl, mode, heads)


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
    mode: str = "shared"
    splits: Optional[int] = None


@dataclass
class Series:
    """The rows of one layout, dtype, launch mode, input mode and head count, one a shape, in CSV order."""

    rows: Dict[Shape, Row] = field(default_factory=dict)
    files: List[str] = field(default_factory=list)

    def shapes(self) -> List[Shape]:
        return list(self.rows)


def series_name(row: Row, hca_file: bool) -> str:
    """plain, plain_bf16, packed, packed_invariant (bench --batch-invariant: no table), hca, hca_plain,
    hca_expansion (dsv4_decode on HCA's expansion), dsa_fp8 or dsa_bf16."""
    kernel = row.kernel
    if kernel == "dsv4_decode" and hca_file and row.path.startswith("expansion:"):
        return "hca_expansion"
    if kernel == "dsv4_decode":
        return "hca_plain" if hca_file else "plain"
    if kernel == "dsv4_decode_packed" and "+invariant" in row.path:
        return "packed_invariant"
    names = {
        "dsv4_decode_bf16": "plain_bf16",
        "dsv4_decode_packed": "packed",
        "dsv4_decode_hca": "hca",
        "dsa_decode": "dsa_fp8",
        "dsa_decode_bf16": "dsa_bf16",
    }
    if kernel not in names:
        raise SystemExit(f"readme_tables: unknown kernel '{kernel}' in {row.file}")
    return names[kernel]


def default_mode(kernel: str) -> str:
    """The mode of a row written before the `mode` column: DSA's were of the distinct one."""
    return "distinct" if kernel.startswith("dsa_decode") else "shared"


def load_results(folder: Path = LATEST) -> Dict[Key, Series]:
    """Every CSV of `folder`, grouped by (series name, pdl, mode, heads).

    Where a file holds several rows of one shape (`bench --kernel all`), the
    row of kAuto (path `auto:...`) is kept, else the first one.
    """
    found: Dict[Key, Series] = {}
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
                mode=r.get("mode") or default_mode(r["kernel"]),
                splits=int(r["splits"]) if r.get("splits") else None,
            )
            if row.mode not in MODES:
                raise SystemExit(f"readme_tables: unknown mode '{row.mode}' in {row.file}")
            pdl = row.path.endswith("+pdl") or pdl_file
            series = found.setdefault((series_name(row, hca_file), pdl, row.mode, row.heads), Series())
            if path.name not in series.files:
                series.files.append(path.name)
            shape = (row.tokens, row.width)
            kept = series.rows.get(shape)
            if kept is None or (not kept.path.startswith("auto") and row.path.startswith("auto")):
                series.rows[shape] = row
    return found


Peers = Dict[Tuple[str, str, int], Dict[Shape, float]]


def load_peers(path: Path = PEERS) -> Peers:
    """peers.csv as {(peer, rows, heads): {(T, width): µs}}."""
    peers: Peers = {}
    if not path.exists():
        return peers
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (r["peer"], r["rows"], int(r["heads"]))
            peers.setdefault(key, {})[(int(r["tokens"]), int(r["width"]))] = float(r["us_per_layer"])
    return peers


def us(value: Optional[float]) -> str:
    if value is None:
        return ""
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.1f}x" if a and b else ""


def tflops(heads: int, shape: Shape, value: Optional[float]) -> str:
    """TFLOP/s of a call of `value` µs: 2 x 512 multiply-adds for the score and 2 x 512 for P V
    per (token, head, column), FlashMLA's count."""
    tokens, width = shape
    return f"{tokens * heads * width * 2048 / (value * 1e6):.0f}" if value else ""


def kernel_label(path: str) -> str:
    """The kernel a plain row ran: `auto:split` -> split; a forced one is marked."""
    if path.startswith("auto:"):
        return path[len("auto:"):]
    return f"{path} (forced)"


def table(header: List[str], lines: List[List[str]], keep: int = 2) -> List[str]:
    """A Markdown table; a column past the first `keep` with no value in any line is left out."""
    used = [i for i in range(len(header)) if i < keep or any(cells[i] for cells in lines)]
    out = ["| " + " | ".join(header[i] for i in used) + " |", "|" + "---|" * len(used)]
    out += ["| " + " | ".join(cells[i] for i in used) + " |" for cells in lines]
    return out


def files_of(*series: Optional[Series]) -> str:
    names: List[str] = []
    for s in series:
        for n in s.files if s else []:
            if n not in names:
                names.append(n)
    return ", ".join(f"`{n}`" for n in names)


def shapes_of(*series: Optional[Series]) -> List[Shape]:
    """The shapes of the series, in the order they first appear."""
    shapes: List[Shape] = []
    for s in series:
        for shape in s.rows if s else {}:
            if shape not in shapes:
                shapes.append(shape)
    return shapes


def by_mode(found: Dict[Key, Series], name: str, heads: int, pdl: bool = False) -> Dict[str, Optional[Series]]:
    return {mode: found.get((name, pdl, mode, heads)) for mode in MODES}


def get(series: Optional[Series], shape: Shape) -> Optional[Row]:
    return series.rows.get(shape) if series else None


def mode_cells(series: Optional[Series], pdl: Optional[Series], shape: Shape, gather: bool = True) -> List[str]:
    """µs, µs with PDL, gather µs and ÷ gather of one mode at one shape (gather columns only if `gather`)."""
    r, p = get(series, shape), get(pdl, shape)
    cells = [us(r.us) if r else "", us(p.us) if p else ""]
    if gather:
        cells.append(us(r.gather_us) if r else "")
    cells.append(ratio(r.us, r.gather_us) if r else "")
    return cells


def mode_header(gather: bool = True) -> List[str]:
    head: List[str] = []
    for mode in MODES:
        head += [f"{mode} µs", f"{mode} µs, PDL"] + ([f"{mode} gather µs"] if gather else []) + [f"{mode} ÷ gather"]
    return head


def ordered_other_shapes(ours: List[Tuple[int, Shape]], peers: List[Tuple[int, Shape]]) -> List[Tuple[int, Shape]]:
    """(heads, shape) of our rows, then the peers' ones we lack; by heads, width as first seen, then T."""
    keys = list(dict.fromkeys(ours + peers))
    widths = list(dict.fromkeys(shape[1] for _, shape in keys))
    return sorted(keys, key=lambda k: (k[0], widths.index(k[1][1]), k[1][0]))


def dsv4_tables(found, peers, name: str, rows_kind: str, title: str,
                extra_peers: List[Tuple[str, str, str]]) -> Tuple[List[str], List[str]]:
    """The 16-head table and the 64/128-head table of the plain or packed layout.

    extra_peers: (peer, rows, header) columns of the 16-head table before FlashMLA's.
    """
    modes = by_mode(found, name, HEADS)
    pdl = by_mode(found, name, HEADS, pdl=True)
    flashmla16 = peers.get(("flashmla_pad64", "packed", HEADS), {})
    peers_run16 = peers.get(("sparse_decode", rows_kind, HEADS), {})
    lines = []
    for shape in shapes_of(*modes.values()):
        any_row = get(modes["shared"], shape) or get(modes["distinct"], shape)
        cells = [str(shape[0]), str(shape[1])]
        if name.startswith("plain"):
            cells.append(kernel_label(any_row.path))
        for mode in MODES:
            cells += mode_cells(modes[mode], pdl[mode], shape)
        distinct = get(modes["distinct"], shape)
        cells += [us(peers.get((peer, kind, HEADS), {}).get(shape)) for peer, kind, _ in extra_peers]
        cells += [us(flashmla16.get(shape)), ratio(flashmla16.get(shape), distinct.us if distinct else None),
                  ratio(flashmla16.get(shape), peers_run16.get(shape))]
        lines.append(cells)
    head = ["T", "width"] + (["kernel"] if name.startswith("plain") else []) + mode_header()
    head += [h for _, _, h in extra_peers]
    head += ["FlashMLA (64-head pad)", "FlashMLA ÷ distinct", "FlashMLA ÷ this, peers' run"]
    main = [f"**{title}, {HEADS} heads** ({files_of(*modes.values(), *pdl.values())})", ""] + table(head, lines)
    if not lines:
        main = []

    ours = [(h, shape) for h in OTHER_HEADS for s in by_mode(found, name, h).values() if s for shape in s.rows]
    theirs = [(h, shape) for h in OTHER_HEADS for peer in (("flashmla", "packed"), ("sparse_decode", rows_kind))
              for shape in peers.get((peer[0], peer[1], h), {})]
    lines = []
    other_series: List[Optional[Series]] = []
    for heads, shape in ordered_other_shapes(ours, theirs):
        at = by_mode(found, name, heads)
        other_series += [s for s in at.values() if s and s not in other_series]
        any_row = get(at["shared"], shape) or get(at["distinct"], shape)
        flashmla = peers.get(("flashmla", "packed", heads), {}).get(shape)
        distinct = get(at["distinct"], shape)
        cells = [str(heads), str(shape[0]), str(shape[1])]
        if name.startswith("plain"):
            cells.append(kernel_label(any_row.path) if any_row else "")
        for mode in MODES:
            r = get(at[mode], shape)
            cells += [us(r.us) if r else "", ratio(r.us, r.gather_us) if r else ""]
        cells += [tflops(heads, shape, distinct.us if distinct else None), us(flashmla),
                  tflops(heads, shape, flashmla), ratio(flashmla, distinct.us if distinct else None),
                  us(peers.get(("sparse_decode", rows_kind, heads), {}).get(shape)),
                  ratio(flashmla, peers.get(("sparse_decode", rows_kind, heads), {}).get(shape))]
        lines.append(cells)
    head = ["heads", "T", "width"] + (["kernel"] if name.startswith("plain") else [])
    for mode in MODES:
        head += [f"{mode} µs", f"{mode} ÷ gather"]
    head += ["distinct TFLOP/s", "FlashMLA", "FlashMLA TFLOP/s", "FlashMLA ÷ distinct", "this, peers' run",
             "FlashMLA ÷ this, peers' run"]
    files = files_of(*other_series)
    source = (files + ", " if files else "") + "`peers.csv`"
    other = ([f"**{title}, {' and '.join(map(str, OTHER_HEADS))} heads** ({source}; FlashMLA at its native head count)",
              ""] + table(head, lines, keep=3)) if lines else []
    return main, other


def plain_table(found, peers) -> List[str]:
    return dsv4_tables(found, peers, "plain", "plain", "`dsv4_decode`, FP8 plain rows",
                       [("pytorch", "plain", "PyTorch")])[0]


def plain_heads_table(found, peers) -> List[str]:
    return dsv4_tables(found, peers, "plain", "plain", "`dsv4_decode`, FP8 plain rows", [])[1]


def packed_table(found, peers) -> List[str]:
    return dsv4_tables(found, peers, "packed", "packed", "`dsv4_decode_packed`, 584-byte rows",
                       [("vllm_triton", "packed", "vLLM Triton")])[0]


def packed_heads_table(found, peers) -> List[str]:
    return dsv4_tables(found, peers, "packed", "packed", "`dsv4_decode_packed`, 584-byte rows", [])[1]


def plain_bf16_table(found, peers) -> List[str]:
    """Every head count of the BF16 rows, both modes (printed with --table, not in the README)."""
    keys = sorted({k[3] for k in found if k[0] == "plain_bf16" and not k[1]})
    lines, all_series = [], []
    for heads in keys:
        modes = by_mode(found, "plain_bf16", heads)
        all_series += [s for s in modes.values() if s]
        for shape in shapes_of(*modes.values()):
            any_row = get(modes["shared"], shape) or get(modes["distinct"], shape)
            cells = [str(heads), str(shape[0]), str(shape[1]), kernel_label(any_row.path)]
            for mode in MODES:
                cells += mode_cells(modes[mode], None, shape)
            lines.append(cells)
    if not lines:
        return []
    head = ["heads", "T", "width", "kernel"] + mode_header()
    return [f"**`dsv4_decode`, BF16 plain rows** ({files_of(*all_series)})", ""] + table(head, lines, keep=3)


def hca_lines(found, heads: int, with_heads: bool) -> Tuple[List[List[str]], List[Optional[Series]]]:
    hca = by_mode(found, "hca", heads)
    plain = by_mode(found, "hca_plain", heads)
    expansion = by_mode(found, "hca_expansion", heads)
    lines = []
    for shape in shapes_of(*hca.values()):
        cells = ([str(heads)] if with_heads else []) + [str(shape[0]), str(shape[1])]
        for mode in MODES:
            r, same, expanded = get(hca[mode], shape), get(plain[mode], shape), get(expansion[mode], shape)
            cells += [us(r.us) if r else "", us(same.us) if same else "", us(expanded.us) if expanded else "",
                      " / ".join(f"{r.us - b.us:+.1f}" for b in (same, expanded) if b) if r else "",
                      us(r.gather_us) if r else "", ratio(r.us, r.gather_us) if r else ""]
        lines.append(cells)
    return lines, list(hca.values())


def hca_header() -> List[str]:
    head: List[str] = []
    for mode in MODES:
        head += [f"{mode} µs", f"{mode} `dsv4_decode`, same rows", f"{mode} on the expansion",
                 f"{mode} difference (same rows / expansion)", f"{mode} gather µs", f"{mode} ÷ gather"]
    return head


def hca_table(found, peers) -> List[str]:
    lines, series = hca_lines(found, HEADS, False)
    if not lines:
        return []
    return ([f"**`dsv4_decode_hca`, FP8, top-k as whole pages of 64 rows, {HEADS} heads** ({files_of(*series)})", ""]
            + table(["T", "width"] + hca_header(), lines))


def hca_heads_table(found, peers) -> List[str]:
    lines, series = [], []
    for heads in OTHER_HEADS:
        more, s = hca_lines(found, heads, True)
        lines += more
        series += s
    if not lines:
        return []
    return ([f"**`dsv4_decode_hca`, FP8, top-k as whole pages, {' and '.join(map(str, OTHER_HEADS))} heads** "
             f"({files_of(*series)})", ""] + table(["heads", "T", "width"] + hca_header(), lines, keep=3))


def dsa_table(found, peers) -> List[str]:
    """DSA in the distinct mode (one request a token, its pages its own), then the shared mode where measured."""
    out: List[str] = []
    for mode in ("distinct", "shared"):
        fp8 = found.get(("dsa_fp8", False, mode, HEADS))
        bf16 = found.get(("dsa_bf16", False, mode, HEADS))
        if not (fp8 or bf16):
            continue
        lines = []
        for shape in shapes_of(fp8, bf16):
            a, b = get(fp8, shape), get(bf16, shape)
            any_row = a or b
            lines.append([str(shape[0]), str(shape[1]), str(any_row.splits or ""),
                          us(a.us) if a else "", us(a.gather_us) if a else "", ratio(a.us, a.gather_us) if a else "",
                          us(b.us) if b else "", us(b.gather_us) if b else "", ratio(b.us, b.gather_us) if b else ""])
        head = ["T", "keys a row", "splits", "FP8 µs", "FP8 gather µs", "FP8 ÷ gather", "BF16 µs", "BF16 gather µs",
                "BF16 ÷ gather"]
        if out:
            out.append("")
        out += ([f"**`dsa_decode`, G = 1, 16 heads, block 64, 16 regions, {mode} mode** ({files_of(fp8, bf16)})", ""]
                + table(head, lines))
    return out


def merge_table(found, peers) -> List[str]:
    """merge_states alone (latest/merge/merge_bf16.csv): BF16 partials and output, µs a merge and x its floor."""
    path = LATEST / "merge" / "merge_bf16.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = {(int(r["ranks"]), int(r["tokens"]), int(r["heads"])): r for r in csv.DictReader(f)}
    ranks = sorted({k[0] for k in rows})
    heads = [h for h in (16, 128) if any(k[2] == h for k in rows)]
    lines = []
    for tokens in sorted({k[1] for k in rows}):
        line = [str(tokens)]
        for h in heads:
            for r in ranks:
                row = rows.get((r, tokens, h))
                merge_us = float(row["us_per_merge"]) if row else 0.0
                line.append(f"{merge_us:.2f} ({merge_us / float(row['floor_us']):.1f}x)" if row else "")
        lines.append(line)
    head = ["T"] + [f"H {h}, R {r}" for h in heads for r in ranks]
    return ([f"**`merge_states` alone, BF16 partials and output, D = 512: µs a merge (x the floor of its bytes at "
             f"4.8 TB/s)** (`merge/merge_bf16.csv`)", ""] + table(head, lines))


ALL_TABLES: Dict[str, Callable] = {
    "plain": plain_table,
    "plain_heads": plain_heads_table,
    "plain_bf16": plain_bf16_table,
    "packed": packed_table,
    "packed_heads": packed_heads_table,
    "hca": hca_table,
    "hca_heads": hca_heads_table,
    "dsa": dsa_table,
    "merge": merge_table,
}
# README.md: one table a layout (16 heads) and the merge; docs/performance.md: the other
# head counts and the BF16 plain rows.
README_TABLES = ["plain", "packed", "hca", "dsa", "merge"]
PERFORMANCE_TABLES = ["plain_heads", "packed_heads", "hca_heads", "plain_bf16"]
TARGETS = [(README, README_TABLES), (PERFORMANCE, PERFORMANCE_TABLES)]


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
        raise SystemExit(f"readme_tables: the file needs a line '{BEGIN}' and a later line '{END}'")
    return "\n".join(lines[:start] + new_block + lines[stop + 1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a file's tables are out of date")
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
    stale = []
    for path, names in TARGETS:
        text = path.read_text()
        updated = rewrite(text, block(names))
        if updated == text:
            continue
        if args.check:
            stale.append(path.relative_to(ROOT).as_posix())
        else:
            path.write_text(updated)
            print(f"{path.relative_to(ROOT).as_posix()}: tables rewritten")
    if stale:
        print(f"{', '.join(stale)}: the performance tables differ from bench/results/latest/ "
              "(run scripts/readme_tables.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
