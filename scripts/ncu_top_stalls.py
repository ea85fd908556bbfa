#!/usr/bin/env python3
"""Summarizes the SASS source page of an Nsight Compute report (the CSV that
scripts/ncu_profile.sh writes): warp-stall samples by opcode, then the SASS
lines with the most samples and how often each executed.

    scripts/ncu_top_stalls.py NAME.sass.csv [LINES]
"""
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, lines = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = list(csv.reader(open(path, errors="replace")))
    header_at = next(i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r))
    header = rows[header_at]
    source = header.index("Source")
    samples = next(i for i, c in enumerate(header) if "Sampling" in c and "All" in c)
    executed = next((i for i, c in enumerate(header) if c.startswith("Instructions Executed")), None)
    address = header.index("Address") if "Address" in header else 0
    data = []
    for r in rows[header_at + 1:]:
        if len(r) > max(source, samples):
            data.append((number(r[samples]), r[address], r[source][:70], number(r[executed]) if executed is not None else 0))
    total = sum(d[0] for d in data) or 1.0
    by_opcode = collections.Counter()
    for d in data:
        words = d[2].split()
        opcode = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        by_opcode[opcode.split(".")[0]] += d[0]
    print(f"{total:.0f} samples; by opcode: " +
          ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_opcode.most_common(14)))
    for d in sorted(data, reverse=True)[:lines]:
        print(f"{100 * d[0] / total:5.1f}% {d[1]} {d[2]}  executed {d[3]:.0f}")


if __name__ == "__main__":
    main()
