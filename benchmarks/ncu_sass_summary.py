"""Summarize Nsight Compute's per-instruction source page of one kernel, by SASS opcode.

Input: the CSV of ``ncu --import REPORT.ncu-rep --page source --csv --print-source sass``
(a report collected with ``--section SourceCounters`` or ``--set full``, and
``--import-source yes``). Output: the columns found, then one line per opcode (``LDSM``,
``LDGSTS``, ``HMMA``, ``IMAD``...: the instruction's first word, predicate and modifiers
dropped) with the instructions executed, the shared-memory wavefronts (actual, ideal,
excessive: where bank conflicts are), and the warp stall samples, then the instructions
with the most excessive shared wavefronts and the most stall samples. Columns are found by
name, case-insensitively ("L1 Wavefronts Shared", "... Ideal", "... Excessive", "Warp
Stall Sampling (All Samples)", "Instructions Executed"); missing ones print as absent.

Usage: ``python benchmarks/ncu_sass_summary.py page.csv [--top 20]`` (or ``-`` for stdin).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys

#: (label, regular expression matched against the column names, case-insensitive)
COLUMNS = (("inst", r"^instructions executed$"),
           ("wf", r"l1 wavefronts shared$"),
           ("wf_ideal", r"l1 wavefronts shared ideal"),
           ("wf_excess", r"l1 wavefronts shared excessive"),
           ("stall", r"warp stall sampling \(all samples\)"),
           ("stall_ni", r"warp stall sampling \(not.issued samples\)"))


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    """The opcode of one SASS line: ``@!P0 LDGSTS.E.BYPASS.128 [R1], ...`` -> ``LDGSTS``."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def summarize(text: str, top: int = 20, out=sys.stdout) -> dict:
    """Print the summary of the source-page CSV ``text``; returns ``{opcode: sums}``."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if '"Source"' in l or l.startswith("Source")
                  or ",Source," in l), None)
    if start is None:
        print("ncu_sass_summary: no 'Source' column header in the input", file=out)
        return {}
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head = [h.strip() for h in rows[0]]
    src = head.index("Source")
    cols = {}
    for label, pat in COLUMNS:
        cols[label] = next((k for k, h in enumerate(head) if re.search(pat, h, re.I)), None)
    print("columns: " + ", ".join(f"{label}={head[k]!r}" if k is not None else f"{label}=absent"
                                  for label, k in cols.items()), file=out)
    per: dict = {}
    insts = []
    for r in rows[1:]:
        if len(r) <= src or not r[src].strip():
            continue
        vals = {label: _number(r[k]) if k is not None and k < len(r) else 0.0
                for label, k in cols.items()}
        op = opcode(r[src])
        acc = per.setdefault(op, {label: 0.0 for label in cols} | {"count": 0})
        acc["count"] += 1
        for label, v in vals.items():
            acc[label] += v
        insts.append((r[src].strip(), vals))
    total = {label: sum(a[label] for a in per.values()) for label in cols}
    print(f"{'opcode':10s} {'n':>4s} {'executed':>12s} {'shared wf':>12s} {'ideal':>12s} "
          f"{'excessive':>12s} {'stalls':>9s} {'%stall':>6s}", file=out)
    for op, a in sorted(per.items(), key=lambda kv: -kv[1]["stall"]):
        if not (a["inst"] or a["stall"] or a["wf"]):
            continue
        share = 100 * a["stall"] / total["stall"] if total["stall"] else 0
        print(f"{op:10s} {a['count']:4d} {a['inst']:12.0f} {a['wf']:12.0f} "
              f"{a['wf_ideal']:12.0f} {a['wf_excess']:12.0f} {a['stall']:9.0f} {share:6.1f}",
              file=out)
    print(f"{'total':10s} {'':4s} {total['inst']:12.0f} {total['wf']:12.0f} "
          f"{total['wf_ideal']:12.0f} {total['wf_excess']:12.0f} {total['stall']:9.0f}",
          file=out)
    for label, title in (("wf_excess", "excessive shared wavefronts"),
                         ("stall", "warp stall samples")):
        ranked = sorted((x for x in insts if x[1][label] > 0), key=lambda x: -x[1][label])
        print(f"-- top {top} instructions by {title}", file=out)
        for s, v in ranked[:top]:
            print(f"{v[label]:10.0f}  wf {v['wf']:.0f}/{v['wf_ideal']:.0f}  exec "
                  f"{v['inst']:.0f}  {s[:110]}", file=out)
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="the source page CSV, or - for stdin")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    text = sys.stdin.read() if args.csv == "-" else open(args.csv).read()
    summarize(text, args.top)


if __name__ == "__main__":
    main()
