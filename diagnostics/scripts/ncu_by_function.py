#!/usr/bin/env python3
"""Warp instructions of one profiled kernel launch by the source function they
come from, with the top opcodes of each: where a chunk's instructions go.

  diagnostics/scripts/ncu_by_function.py KERNEL.sass NCU_SASS.csv [DIVISOR]

KERNEL.sass: `nvdisasm -g -c` of the kernel's cubin (the build has -lineinfo),
e.g. `cuobjdump -xelf stream_pv_warps_fp8_h16.sm_90a.cubin build/libsparse_decode.so`
then `nvdisasm -g -c stream_pv_warps_fp8_h16.sm_90a.cubin`; the cubin must hold
only the profiled kernel (one template instance a file, as src/dsv4 has them).
NCU_SASS.csv: `ncu --import R.ncu-rep --page source --print-source sass --csv`
(diagnostics/scripts/ncu_profile.sh writes it). DIVISOR: counts are divided by it (the
launch's chunks, say), default 1.

A line is charged to the innermost function whose definition starts above it
in its file (the `__device__` definitions of src/); lines of CUDA's own headers
keep the header's name.
"""
import collections
import pathlib
import re
import sys

from ncu_top_stalls import number, opcode, sass_page

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def sass_lines(path):
    """offset -> ((file, line) or None, opcode)"""
    where, out = None, {}
    for text in open(path):
        m = re.match(r'\s*//## File "(.*)", line (\d+)', text)
        if m:
            where = (pathlib.Path(m.group(1)).name, int(m.group(2)))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", text)
        if m:
            out[int(m.group(1), 16)] = (where, opcode(m.group(2)))
    return out


def definitions():
    """file name -> [(first line, function name)] of src/'s __device__ functions"""
    found = collections.defaultdict(list)
    for path in SRC.rglob("*.cuh"):
        for number, text in enumerate(open(path), 1):
            if re.match(r"\s*__device__", text):
                m = re.search(r"(\w+)\s*\(", text.split("__forceinline__")[-1])
                if m:
                    found[path.name].append((number, m.group(1)))
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    offsets = sass_lines(sys.argv[1])
    divisor = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    header, rows = sass_page(sys.argv[2])
    executed = header.index("Instructions Executed")
    body = [r for r in rows if len(r) > executed and r[0].startswith("0x")]
    base = int(body[0][0], 16)
    defs = definitions()

    def function(where):
        if where is None:
            return "?"
        name, line = where
        owner = "?"
        for first, fn in defs.get(name, []):
            if first <= line:
                owner = fn
        return f"{name.rsplit('.', 1)[0]}:{owner}"

    total = collections.Counter()
    opcodes = collections.defaultdict(collections.Counter)
    for r in body:
        where, opcode = offsets.get(int(r[0], 16) - base, (None, "?"))
        key = function(where)
        count = number(r[executed])
        total[key] += count
        opcodes[key][opcode] += count
    print(f"{sum(total.values()) / divisor:.0f} warp instructions (divided by {divisor:g})")
    for key, count in total.most_common(40):
        top = " ".join(f"{op}:{n / divisor:.0f}" for op, n in opcodes[key].most_common(8))
        print(f"{count / divisor:8.0f}  {key:45s} {top}")


if __name__ == "__main__":
    main()
