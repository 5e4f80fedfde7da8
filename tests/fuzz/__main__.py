"""``python -m tests.fuzz --seeds 0:1000 [--target llvm|cuda] [--shrink]``: run the cases of
a seed range and print a table of outcome classes per kind of program, then every failure
as a reproducer script (shrunk with ``--shrink``)."""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

from .cases import ALL_KINDS, generate, kind_of
from .runner import CLASSES, FAILURES
from .script import first_line, reproducer
from .triage import FAULTS, tag
from .worker import run_cases


def _seeds(text: str) -> range:
    lo, _, hi = text.partition(":")
    return range(int(lo), int(hi)) if hi else range(int(lo), int(lo) + 1)


def table(rows: dict) -> str:
    """``rows``: kind -> Counter of classes; a fixed-width table with totals."""
    cols = [c for c in CLASSES if any(r[c] for r in rows.values())] or ["ok"]
    total = collections.Counter()
    for r in rows.values():
        total.update(r)
    out = [f"{'kind':<14}" + "".join(f"{c:>9}" for c in cols) + f"{'total':>9}"]
    for k in list(ALL_KINDS) + ["all"]:
        r = total if k == "all" else rows.get(k)
        if r is None:
            continue
        out.append(f"{k:<14}" + "".join(f"{r[c]:>9}" for c in cols) + f"{sum(r.values()):>9}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--seeds", default="0:100", help="a range lo:hi (default 0:100)")
    ap.add_argument("--target", default="llvm", choices=("llvm", "cuda"))
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per case (default 20 for llvm, 60 for cuda)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--kind", action="append", choices=ALL_KINDS, help="only these kinds")
    ap.add_argument("--shrink", action="store_true", help="shrink every failure")
    ap.add_argument("--json", help="write one JSON line per case (case + outcome) here")
    ap.add_argument("--quiet", action="store_true", help="no reproducers, only the table")
    a = ap.parse_args(argv)
    timeout = a.timeout or (20.0 if a.target == "llvm" else 60.0)
    seeds = [s for s in _seeds(a.seeds) if not a.kind or kind_of(s, a.target) in a.kind]
    rows: dict = collections.defaultdict(collections.Counter)
    failures, done = [], []
    t0 = time.perf_counter()
    sink = open(a.json, "w") if a.json else None
    cases = (generate(s, a.target) for s in seeds)
    for n, (case, out) in enumerate(run_cases(cases, a.target, timeout, a.jobs), 1):
        rows[case["kind"]][out["cls"]] += 1
        done.append((case, {"build_s": out.get("build_s", 0)}))
        if sink:
            sink.write(json.dumps({"case": case, "outcome": out}) + "\n")
            sink.flush()
        if out["cls"] in FAILURES or out["cls"] == "invalid":
            out["fault"] = tag(case, out)
            failures.append((case, out))
            print(f"seed {case['seed']} ({case['kind']}) [{out['fault']}]: {first_line(out)}",
                  file=sys.stderr)
        if n % 50 == 0:
            print(f"... {n}/{len(seeds)} cases, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr)
    if sink:
        sink.close()
    print(f"{len(seeds)} cases, target {a.target}, {time.perf_counter() - t0:.0f} s")
    print(table(rows))
    slow = sorted(((o.get("build_s", 0), c["seed"]) for c, o in done if o.get("build_s", 0) > 10),
                  reverse=True)
    if slow:
        print("\nbuilds over 10 s: " + ", ".join(f"seed {s} ({t:.0f} s)" for t, s in slow))
    faults = collections.Counter(o["fault"] for _, o in failures)
    if faults:
        print("\nfailures by likely fault (tests/fuzz/triage.py):")
        for f, n in faults.most_common():
            seeds = [c["seed"] for c, o in failures if o["fault"] == f]
            print(f"  {n:5d}  {f}: {FAULTS.get(f, 'not a known fault')}")
            print(f"         seeds {seeds[:40]}{' ...' if len(seeds) > 40 else ''}")
    if failures and not a.quiet:
        from .shrink import shrink

        for case, out in failures:
            if a.shrink and out["cls"] in FAILURES:
                print(f"shrinking seed {case['seed']} ...", file=sys.stderr)
                case, out = shrink(case, out, timeout=timeout,
                                   log=lambda m: print(m, file=sys.stderr))
                out["fault"] = tag(case, out)
            print("\n" + "=" * 78)
            print(f"# likely fault: {out['fault']}")
            print(reproducer(case, out))
    return 1 if any(o["cls"] in FAILURES for _, o in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
