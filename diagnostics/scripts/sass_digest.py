#!/usr/bin/env python3
"""Per-kernel digests of a binary's SASS, to prove that a change leaves code alone.

    diagnostics/scripts/sass_digest.py build/libsparse_decode.so > sass.txt
    diagnostics/scripts/sass_digest.py --compare old.txt new.txt

Each line is `md5 name`: the md5 of the kernel's instruction lines (opcodes
and operands, without addresses, encodings or the file it came from), and
its demangled name. --compare matches the two files by digest, so renamed
kernels with unchanged code still match, and lists what differs.
Needs cuobjdump (CUDA toolkit; PyPI's nvidia-cuda-cuobjdump) and c++filt.
"""
import argparse
import hashlib
import re
import subprocess
import sys
from collections import Counter

INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def digests(binary):
    sass = subprocess.run(["cuobjdump", "-sass", binary], check=True, capture_output=True, text=True).stdout
    kernels, name, lines = [], None, []
    for line in sass.splitlines() + ["Function : <end>"]:
        if "Function :" in line:
            if name is not None:
                kernels.append((hashlib.md5("\n".join(lines).encode()).hexdigest(), name))
            name, lines = line.split("Function :", 1)[1].strip(), []
            continue
        match = INSTRUCTION.match(line)
        if match and name is not None:
            lines.append(match.group(1))
    names = [k[1] for k in kernels]
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return sorted(zip([k[0] for k in kernels], demangled), key=lambda k: k[1])


def read(path):
    with open(path) as f:
        return [tuple(line.rstrip("\n").split(" ", 1)) for line in f if line.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        old, new = read(args.compare[0]), read(args.compare[1])
        old_count, new_count = Counter(d for d, _ in old), Counter(d for d, _ in new)
        only_old = [(d, n) for d, n in old if old_count[d] > new_count[d]]
        only_new = [(d, n) for d, n in new if new_count[d] > old_count[d]]
        print(f"{len(old)} kernels before, {len(new)} after, {sum((old_count & new_count).values())} identical")
        for d, n in only_old:
            print(f"  only before: {d} {n}")
        for d, n in only_new:
            print(f"  only after:  {d} {n}")
        return 1 if only_old or only_new else 0
    for digest, name in digests(args.binary):
        print(digest, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
