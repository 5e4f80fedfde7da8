"""The figures the ``polytile`` command line prints: times (median ± spread), GFLOP/s,
``polytile tune``'s summary and ``polytile run``'s timing beside the tuning's.

Kept apart from :mod:`polytile.cli` (whose commands import their modules when they run)
and free of heavy imports itself.
"""

from __future__ import annotations

import json
import math


class Fail(Exception):
    """A user-facing error with a one-line message."""


def fmt_time(s: float) -> str:
    """Seconds as ``1.234 s``, ``4.248 ms`` or ``12.5 us`` (``-`` when not finite)."""
    if not math.isfinite(s):
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def gflops(flops, cost) -> str:
    """``flops`` over ``cost`` seconds in GFLOP/s with one decimal (``-`` without either)."""
    if not flops or not math.isfinite(cost):
        return "-"
    return f"{flops / cost / 1e9:.1f}"


def pm(t) -> str:
    """``4.248 ms ± 1.2 %``: a Timing's median and its spread (IQR / median)."""
    return f"{fmt_time(t.median)} ± {t.spread * 100:.1f} %"


def noise_word(spread: float) -> str:
    """How to read figures of a given spread (IQR / median): quiet up to 5 %, noisy up to
    20 %, very noisy beyond."""
    if spread <= 0.05:
        return "quiet"
    if spread <= 0.20:
        return "noisy"
    return "very noisy: the figures are indicative only"


def load_note() -> str:
    """``load average 3.2 on 2 cores``: other processes compete for the cores when the
    first number passes the second, whatever the spreads say (a measurement can be slowed
    as a whole)."""
    import os

    try:
        return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def blas_rows(anchors) -> list:
    """Rows naming numpy's BLAS kernel (``numpy BLAS``) and, when ``OPENBLAS_CORETYPE``
    pins an older kernel than the CPU runs, a ``warning`` with the fix
    (:func:`polytile.autotune.blas.anchor_note`); none when numpy is not among
    ``anchors``."""
    if "numpy" not in anchors:
        return []
    import sys

    from polytile.autotune.blas import anchor_note

    desc, warn = anchor_note(command=" ".join(["polytile"] + sys.argv[1:]))
    return [("numpy BLAS", desc)] + ([("warning", warn)] if warn else [])


def print_summary(res, out) -> None:
    """The summary of ``polytile tune``: figures from the final comparison (best and
    default configs timed alternately with numpy, and torch when installed) when there is
    one, else from the records; every time a median ± its spread (IQR / median)."""
    best = res.best
    flops = res.flops
    cmp = res.comparison
    rows = [("workload", str(res.workload)), ("target", res.target)]
    dev = getattr(res, "device", None)
    if dev:
        rows.append(("device", f"{dev.get('name')} (sm_{dev.get('compute_capability', '')}"
                     .replace(".", "") + f", driver {dev.get('driver') or '?'}, CUDA "
                     f"{dev.get('cuda') or '?'})"))
    if getattr(res, "transferred", 0):
        rows.append(("warm start", f"model trained on {res.transferred} records of "
                     f"{res.transfer_shapes} other shape(s) (not measured, never applied)"))
    tb = cmp.timing("best") if cmp is not None else None
    td = cmp.timing("default") if cmp is not None else None
    timed = [a for a in cmp.anchors if cmp.timing(a) is not None] if cmp is not None else []
    tn = cmp.timing(timed[0]) if timed else None  # the first anchor timed (numpy)
    if best is not None:
        cost = tb.median if tb is not None else best.cost
        ratios = [f"{cmp.ratio(a):.2f} x {a}" for a in timed] if tb is not None else []
        rtxt = f"  ({', '.join(ratios)})" if ratios else ""
        rows.append(("best", f"{gflops(flops, cost)} GFLOP/s{rtxt}" if flops
                     else fmt_time(cost) + rtxt))
        if tb is not None:
            rows.append(("median time", f"{pm(tb)} ({len(tb.costs)} repeats in "
                         f"{len(cmp.rounds)} rounds"
                         f"{', alternating with ' + ' and '.join(timed) if timed else ''}"
                         f"; {fmt_time(best.cost)} when searched)"))
        else:
            rows.append(("median time", f"{fmt_time(best.cost)} ± "
                         f"{best.spread_value * 100:.1f} %"))
        fin = [(r, tm) for r, tm in getattr(res, "finalists", ()) if tm is not None]
        if len(fin) > 1:
            def rate(cost):
                return f"{gflops(flops, cost)} GFLOP/s" if flops else fmt_time(cost)
            rows.append(("re-measured", f"{len(fin)} configs (the search's fastest and the "
                         "default) timed alternately, the best by that: " + ", ".join(
                             f"{rate(tm.median)} (searched {rate(r.cost)})"
                             + (" <- best" if r is best else "") for r, tm in fin)))
    else:
        rows.append(("best", "none (every trial failed)"))
    if td is not None:
        rows.append(("default config", f"{gflops(flops, td.median)} GFLOP/s ({pm(td)})"
                     if flops else pm(td)))
    elif res.default is not None and res.default.ok:
        same = best is not None and res.default.config == best.config
        d = tb if same and tb is not None else None
        txt = pm(d) if d is not None else fmt_time(res.default.cost)
        rows.append(("default config", (f"{gflops(flops, d.median if d else res.default.cost)}"
                     f" GFLOP/s ({txt})" if flops else txt) + (" (= best)" if same else "")))
    for a in cmp.anchors if cmp is not None else ():
        ta = cmp.timing(a)
        if ta is not None:
            rows.append((a, f"{gflops(flops, ta.median)} GFLOP/s ({pm(ta)}, same inputs, "
                         "timed alternately)" if flops else f"{pm(ta)} (timed alternately)"))
        elif a in cmp.errors:
            rows.append((a, f"not timed: {cmp.errors[a][1]}"))
    rows += blas_rows(timed)
    nz = res.noise()
    if nz["trials"]:
        worst = max([nz["median_spread"]] + ([cmp.noise] if cmp is not None else []))
        parts = [f"trials' spread median {nz['median_spread'] * 100:.1f} %, max "
                 f"{nz['max_spread'] * 100:.0f} %, {nz['remeasured']} of {res.n_trials} "
                 "re-measured"]
        if cmp is not None and tn is not None and tb is not None:
            parts.append(f"ratio over {len(cmp.rounds)} rounds moved "
                         f"{cmp.ratio_spread(timed[0]) * 100:.1f} %")
        rows.append(("noise", "; ".join(parts) + f"; {load_note()} ({noise_word(worst)})"))
    fails = res.failures()
    ftxt = ", ".join(f"{n} {code}" for code, n in sorted(fails.items()))
    resumed = f", {res.resumed} resumed" if res.resumed else ""
    rows.append(("trials", f"{res.n_trials} measured{resumed}, {res.n_failed} failed"
                 + (f" ({ftxt})" if ftxt else "")))
    new = max(1, res.n_trials - res.resumed)
    rate = f", {new / res.wall_s:.2f} trials/s" if res.wall_s > 0 else ""
    rows.append(("wall time", f"{res.wall_s:.1f} s{rate} (tuner overhead "
                 f"{res.overhead_s / new:.2f} s per trial; stopped: "
                 f"{res.stop_reason or '-'})"))
    if getattr(res, "runner_restarts", 0):
        rows.append(("gpu runner", f"restarted {res.runner_restarts} times (faulting or "
                     "hung kernels; see the failed trials)"))
    for n in res.nodes or ():  # tuned on a Ray cluster
        rows.append((f"node {n['host']}", f"{n['trials']} trials, {n['trials_per_s']:.2f} "
                     f"trials/s ({', '.join(n['devices'])}; node {n['node_id'][:8]})"))
    if best is not None:
        rows.append(("best config", " ".join(f"{k}={json.dumps(v)}"
                                             for k, v in best.config.items())))
    rows.append(("records", res.log_file or "-"))
    print("", file=out)
    for k, v in rows:
        print(f"  {k:<15} {v}", file=out)
    out.flush()


def tuned_summary(log: str, rec):
    """The latest summary record of ``log`` for ``rec``'s workload, target and config."""
    from polytile.autotune.records import read_records, target_matches, workload_matches

    found = None
    for r in read_records(log, summaries=True):
        if (r.phase == "summary" and workload_matches(r, rec.workload)
                and target_matches(r.target, rec.target) and r.config == rec.config):
            found = r
    return found


def run_timing(t, wl, target: str, rec, log: str, threads) -> None:
    """Time the record's config as ``polytile tune``'s summary does
    (:meth:`LocalMeasurer.compare`: a worker process, alternating with numpy) and set the
    figure beside the tuning's."""
    from polytile.autotune import LocalMeasurer, MeasureOptions
    from polytile.autotune.anchors import available
    from polytile.autotune.timing import Timing

    knobs = rec.config if rec is not None else t.space(wl.args, wl.dtype, target) \
        .default().knob_values()
    anchors = tuple(available(t, wl.args, target))
    with LocalMeasurer(wl, target, MeasureOptions(parallel=1, threads=threads or 0)) as m:
        cmp = m.compare([("best", knobs)], anchors)
    if "best" in cmp.errors:
        code, msg = cmp.errors["best"]
        raise Fail(f"timing the kernel failed ({code}): {msg}")
    tb = cmp.timing("best")
    flops = t.flops(wl.args)
    print(f"  polytile        {gflops(flops, tb.median)} GFLOP/s ({pm(tb)})")
    for a in anchors:
        ta = cmp.timing(a)
        if ta is not None:
            print(f"  {a:<15} {gflops(flops, ta.median)} GFLOP/s ({pm(ta)}, timed "
                  f"alternately); ratio {cmp.ratio(a):.2f}")
        else:
            print(f"  {a:<15} not timed: {cmp.errors.get(a, ('', '?'))[1]}")
    for k, v in blas_rows([a for a in anchors if cmp.timing(a) is not None]):
        print(f"  {k:<15} {v}")
    if rec is not None:
        summ = tuned_summary(log, rec)
        if summ is not None:
            tuned = Timing(tuple(summ.costs))
            where = f"summary {log}:{summ.line}"
        else:
            tuned = Timing(tuple(rec.costs))
            where = f"record {log}:{rec.line}"
        print(f"  when tuned      {pm(tuned)} ({where}); now / then "
              f"{tb.median / tuned.median:.2f}")
    print(f"  noise           {noise_word(cmp.noise)} (largest spread "
          f"{cmp.noise * 100:.1f} %; {load_note()})")
