#!/usr/bin/env python3
"""Summarizes the SASS source page of an Nsight Compute report (the CSV that
diagnostics/scripts/ncu_profile.sh writes): warp-stall samples by opcode, then the SASS
lines with the most samples and how often each executed.

    diagnostics/scripts/ncu_top_stalls.py NAME.sass.csv [LINES]
"""
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(sass):
    """The opcode of a SASS line without its predicate and modifiers: `@P0 BRA ...` -> BRA."""
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def sass_page(path):
    """The source page's column names and its rows (one a SASS line)."""
    rows = list(csv.reader(open(path, errors="replace")))
    header_at = next(i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r))
    return rows[header_at], rows[header_at + 1:]


def main():
    path, lines = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    header, rows = sass_page(path)
    source = header.index("Source")
    samples = next(i for i, c in enumerate(header) if "Sampling" in c and "All" in c)
    executed = next((i for i, c in enumerate(header) if c.startswith("Instructions Executed")), None)
    address = header.index("Address") if "Address" in header else 0
    data = []
    for r in rows:
        if len(r) > max(source, samples):
            data.append((number(r[samples]), r[address], r[source][:70], number(r[executed]) if executed is not None else 0))
    total = sum(d[0] for d in data) or 1.0
    by_opcode = collections.Counter()
    for d in data:
        by_opcode[opcode(d[2])] += d[0]
    print(f"{total:.0f} samples; by opcode: " +
          ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_opcode.most_common(14)))
    for d in sorted(data, reverse=True)[:lines]:
        print(f"{100 * d[0] / total:5.1f}% {d[1]} {d[2]}  executed {d[3]:.0f}")


if __name__ == "__main__":
    main()
