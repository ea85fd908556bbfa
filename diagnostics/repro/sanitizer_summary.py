#!/usr/bin/env python3
"""Sorts compute-sanitizer reports into expected and unexpected ones.

    sanitizer_summary.py --expected expected_reports.txt \
        --log racecheck=tests.racecheck.log --log synccheck=tests.synccheck.log \
        --repro racecheck:tile-handoff=repro.racecheck.tile-handoff.log ...
    sanitizer_summary.py --describe LOG      one line: the log's reports by kind
    sanitizer_summary.py --expected FILE --list TOOL   the entries of TOOL: name<TAB>reproducer

Each --log is a GPU-test run under one tool; each --repro the run of an
expected entry's reproducer under that tool. A report of the tests is
expected when an entry of the same tool matches its kind and its locations
and that entry's reproducer shows a report of the same kind. Prints one line
per tool and per entry; exit status 1 when a report is unexpected or an
entry is matched but not reproduced. `--self-test` checks the parser on
reports of the formats compute-sanitizer prints.
"""
import argparse
import re
import sys

_PREFIX = re.compile(r"^=+ ?")
_IGNORED = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application",
            "Saved host backtrace", "Host Frame", "Program hit", "No ",
            "Warning: Maximum number of hazards reached")  # racecheck's cap on what it lists, not a report


def parse(text):
    """The reports of a log: dicts with kind and where (every location, joined)."""
    reports, current = [], None
    for raw in text.splitlines():
        if not raw.startswith("="):
            continue
        body = _PREFIX.sub("", raw, count=1)
        indented = body.startswith(" ")
        line = body.strip()
        if not line:
            continue
        if not indented:
            if line.startswith(_IGNORED):
                current = None
                continue
            current = {"kind": None, "where": [], "first": line}
            reports.append(current)
            race = re.match(r"(?:Error|Warning): Race reported between (\w+) access at (.*)", line)
            barrier = re.match(r"Barrier error detected\.\s*(.*)", line)
            if race:
                current["kind"] = "race " + race.group(1)
                current["where"].append(race.group(2))
            elif barrier:
                current["kind"] = barrier.group(1).strip().rstrip(".")
            else:
                current["kind"] = re.sub(r"\d+", "#", re.sub(r"0x[0-9a-fA-F]+", "#", line))
            continue
        if current is None:
            continue
        also = re.match(r"and (\w+) access at (.*)", line)
        if also:
            if "/" not in current["kind"]:
                current["kind"] += "/" + also.group(1)
            current["where"].append(also.group(2))
        elif line.startswith("at "):
            current["where"].append(line[3:])
        elif line.startswith("Device Frame:"):  # the caller of an inlined helper: the kernel
            current["where"].append(line[len("Device Frame:"):].strip())
    for r in reports:
        r["where"] = " | ".join(r["where"])
    return reports


def read_expected(path):
    entries = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = [x.strip() for x in line.split(" | ")]
            if len(fields) != 6:
                raise SystemExit(f"{path}: expected 6 fields: {line}")
            name, tool, kind, where, repro, repro_where = fields
            entries.append({"name": name, "tool": tool, "kind": re.compile(kind), "where": re.compile(where),
                            "repro": repro, "repro_where": re.compile(repro_where)})
    return entries


def matches(entry, report, where_key="where"):
    return bool(entry["kind"].search(report["kind"] or "")) and bool(entry[where_key].search(report["where"]))


def summarize(entries, logs, repros, out=sys.stdout):
    failed = False
    reproduced = {}
    for (tool, name), text in repros.items():
        entry = next((e for e in entries if e["tool"] == tool and e["name"] == name), None)
        if entry:
            reproduced[(tool, name)] = any(matches(entry, r, "repro_where") for r in parse(text))
    for tool, text in logs.items():
        reports = parse(text)
        counts, unexpected = {}, []
        for r in reports:
            entry = next((e for e in entries if e["tool"] == tool and matches(e, r)), None)
            if entry and reproduced.get((tool, entry["name"])):
                counts[entry["name"]] = counts.get(entry["name"], 0) + 1
            elif entry:
                unexpected.append((r, f"matches {entry['name']}, which its reproducer does not show"))
            else:
                unexpected.append((r, "matches no expected entry"))
        named = ", ".join(f"{n} x{c} (reproduced by {next(e['repro'] for e in entries if e['name'] == n)})"
                          for n, c in counts.items()) or "none"
        print(f"{tool}: {len(reports)} reports, {len(reports) - len(unexpected)} expected [{named}], "
              f"{len(unexpected)} unexpected", file=out)
        for r, why in unexpected[:10]:
            print(f"  UNEXPECTED {tool}: {r['kind']} at {r['where'][:300]} ({why})", file=out)
        failed = failed or bool(unexpected)
    for e in entries:
        if (e["tool"], e["name"]) in reproduced:
            state = "reproduced" if reproduced[(e["tool"], e["name"])] else "NOT reproduced"
            print(f"expected {e['tool']} {e['name']}: {state} by {e['repro']}", file=out)
    return 1 if failed else 0


_RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void sparse_decode::dsv4::stream_kernel<A>(P)+0x1a40 in /s/src/common/ptx/copy.cuh:38
=========     and Read access at void sparse_decode::dsv4::stream_kernel<A>(P)+0x2b30 in /s/src/common/ptx/mma.cuh:14 [1123456 hazards]
=========     and Read access at void sparse_decode::dsv4::stream_kernel<A>(P)+0x2c30 in /s/src/common/ptx/mma.cuh:9 [6 hazards]
=========
========= Error: Race reported between Write access at void sparse_decode::dsv4::split_kernel<A>(P)+0x10 in /s/src/dsv4/steps/score.cuh:23
=========     and Read access at void sparse_decode::dsv4::split_kernel<A>(P)+0x20 in /s/src/dsv4/steps/softmax.cuh:40 [3 hazards]
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
"""
_REPRO_RACE = """========= Error: Race reported between Read access at void {anonymous}::handoff(const unsigned char *, int, int, int, unsigned int *)+0x900 in /s/diagnostics/repro/tile_handoff.cu:160
=========     and Write access at void {anonymous}::handoff(const unsigned char *, int, int, int, unsigned int *)+0x700 in /s/diagnostics/repro/tile_handoff.cu:130 [512 hazards]
"""
_SYNC = """========= Barrier error detected. Missing wait.
=========     at sparse_decode::ptx::mbarrier_arrive_expect_tx(unsigned int, unsigned int)+0x6c0 in sync.cuh:20
=========     by thread (0,0,0) in block (8,0,0)
=========     Barrier is located at shared address 0x8016820
=========         Device Frame: void sparse_decode::dsv4::cluster_kernel<A>(P)+0x6c0 in cluster_kernel.cuh:92
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cudaLaunchKernelExC [0xcc2fa] in libsparse_decode.so.0.1.0
=========
========= Invalid __global__ write of size 4 bytes
=========     at void sparse_decode::dsa::combine_kernel(P)+0x80 in /s/src/dsa/kernels/combine_kernel.cuh:50
=========     by thread (3,0,0) in block (0,0,0)
========= ERROR SUMMARY: 2 errors
"""


def self_test():
    entries = read_expected_text(
        "tile-handoff | racecheck | ^race (Write/Read|Read/Write)$ | (?=.*stream_kernel)(?=.*copy\\.cuh)(?=.*mma\\.cuh)"
        " | repro-tile-handoff named | (?=.*handoff)(?=.*tile_handoff\\.cu)\n"
        "cluster-receive | synccheck | ^Missing wait$ | cluster_kernel | repro-cluster-receive st-async | receive\n")
    races = parse(_RACE)
    assert [r["kind"] for r in races] == ["race Write/Read", "race Write/Read"], races
    sync = parse(_SYNC)
    assert [r["kind"] for r in sync] == ["Missing wait", "Invalid __global__ write of size # bytes"], sync
    assert "combine_kernel" in sync[1]["where"]
    import io
    out = io.StringIO()
    status = summarize(entries, {"racecheck": _RACE}, {("racecheck", "tile-handoff"): _REPRO_RACE}, out)
    assert status == 1 and "1 unexpected" in out.getvalue() and "split_kernel" in out.getvalue(), out.getvalue()
    out = io.StringIO()
    status = summarize(entries, {"racecheck": _RACE.split("=========\n========= Error")[0]},
                       {("racecheck", "tile-handoff"): _REPRO_RACE}, out)
    assert status == 0 and "1 expected" in out.getvalue(), out.getvalue()
    out = io.StringIO()
    status = summarize(entries, {"racecheck": _RACE.split("=========\n========= Error")[0]},
                       {("racecheck", "tile-handoff"): ""}, out)
    assert status == 1 and "NOT reproduced" in out.getvalue(), out.getvalue()
    out = io.StringIO()
    assert summarize(entries, {"synccheck": _SYNC}, {("synccheck", "cluster-receive"): _SYNC.replace(
        "sparse_decode::dsv4::cluster_kernel<A>(P)", "{anonymous}::receive(int, int *)")}, out) == 1
    assert "Invalid __global__ write" in out.getvalue() and "1 expected" in out.getvalue(), out.getvalue()
    print("sanitizer_summary self-test: PASS")
    return 0


def read_expected_text(text):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    return read_expected(f.name)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--expected")
    parser.add_argument("--log", action="append", default=[], help="TOOL=PATH: the GPU tests under TOOL")
    parser.add_argument("--repro", action="append", default=[], help="TOOL:ENTRY=PATH: an entry's reproducer under TOOL")
    parser.add_argument("--describe", help="PATH: print a log's reports by kind, one line")
    parser.add_argument("--list", metavar="TOOL", help="print each entry of TOOL: name, a tab, its reproducer command")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.describe:
        reports = parse(open(args.describe, errors="replace").read())
        kinds = {}
        for r in reports:
            kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
        print(f"{len(reports)} reports" + "".join(f", {k} x{n}" for k, n in kinds.items()))
        return 0
    entries = read_expected(args.expected)
    if args.list:
        for e in entries:
            if e["tool"] == args.list:
                print(f"{e['name']}\t{e['repro']}")
        return 0
    logs = {}
    for item in args.log:
        tool, path = item.split("=", 1)
        logs[tool] = open(path, errors="replace").read()
    repros = {}
    for item in args.repro:
        key, path = item.split("=", 1)
        tool, name = key.split(":", 1)
        repros[(tool, name)] = open(path, errors="replace").read()
    return summarize(entries, logs, repros)


if __name__ == "__main__":
    sys.exit(main())
