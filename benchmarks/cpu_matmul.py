"""Benchmark: fp32 matmul on the CPU, polytile's BLAS-style schedule vs numpy (OpenBLAS).

For each shape (1024^3, 4096^3, 64^3 and the skinny 256x4096x64 by default) and each
thread count (1 and 2) prints one line: numpy's GFLOP/s, polytile's GFLOP/s (the hand
schedule ``blas_like`` of ``tutorials/02_cpu_matmul.py``, which is the ``matmul``
template's default config) and, with ``--log``, the best tuned record's; each the median
of its repeats with its spread, and the ratio to numpy. The figures come from the tuner's
own comparison (:meth:`polytile.autotune.LocalMeasurer.compare`): the kernels run in a
worker process and numpy in a process of its own, timed alternately (A B / B A rounds, the
other side stopped while one is timed), so a load spike weighs on both sides of a ratio.
Both sides are timed as a user calls them (:mod:`polytile.autotune.timing`): polytile's
``f(a, b, c)`` (Python call and argument checks included) against numpy's
``np.matmul(a, b, out=c)``; at 64^3 the call overheads (about 1 us against 0.7) are part
of the ratio, as they are of ``polytile run``'s and of the tuner's summary.
The load average is printed with every line: on a shared machine the figures are
indicative only.

numpy's kernel depends on ``OPENBLAS_CORETYPE``, which some machines set for old OpenBLAS
builds; to compare with numpy's own choice, run without it (the first line says which
kernel numpy uses, and a warning follows when the variable pins an older kernel than the
CPU runs: :mod:`polytile.autotune.blas`)::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/cpu_matmul.py

Options: ``--shapes 1024,1024,1024;64,64,64``, ``--threads 1,2``, ``--rounds 4``,
``--clock cpu`` (the processes' CPU time: see :mod:`polytile.autotune.timing`),
``--no-peak`` (skip the FMA peak: by default every figure is also printed as a fraction
of it, the peak of ``benchmarks/cpu_ops.py``'s microkernel times the threads),
``--log tune.jsonl`` (add the tuned records of the same shapes), ``--batch`` (add
``batch_matmul`` 8x256x256x256), ``--blis`` (add the template's blis loop order,
:func:`polytile.autotune.templates.blis_knobs` over the default config, timed in the
same A/B rounds).
"""

from __future__ import annotations

import argparse
import os

SHAPES = ((1024, 1024, 1024), (4096, 4096, 4096), (64, 64, 64), (256, 4096, 64))


def _gflops(flops: float, t, peak: float | None = None) -> str:
    frac = f", {flops / t.median / peak:4.2f} of peak" if peak else ""
    return f"{flops / t.median / 1e9:7.1f} GFLOP/s (±{t.spread * 100:4.1f}%{frac})"


def fma_peak() -> float:
    """One core's FMA peak (FLOP/s), measured as ``benchmarks/cpu_ops.py``'s ``bounds``
    measures it (its ``fma_kernel``: independent vector FMA chains in registers, the best
    of many short samples after a warm-up)."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cpu_ops import _best, fma_kernel

    fma, flop_per_iter, *_ = fma_kernel()
    fma(2_000_000)  # a few ms at full load first: the core's clock settles
    iters = 20_000
    return iters * flop_per_iter / _best(lambda: fma(iters), 300)


def bench(template: str, args: tuple, threads: int, rounds: int, log: str | None,
          blis: bool = False, clock: str = "wall", peak: float | None = None) -> str:
    """One line of figures for ``template`` at ``args`` with ``threads`` threads (and the
    blis order's config of ``matmul`` when ``blis``); with ``peak`` (one core's FLOP/s)
    each figure's fraction of ``threads`` times it."""
    from polytile.autotune import LocalMeasurer, MeasureOptions, get_template, load_best
    from polytile.autotune.data import resolve
    from polytile.autotune.templates import blis_knobs

    t, wl = resolve(template, args, "float32")
    items = [("hand", t.space(wl.args, wl.dtype).default().knob_values())]
    if blis and template == "matmul":
        items.append(("blis", dict(items[0][1], **blis_knobs(*wl.args))))
    if log:
        rec = load_best(log, wl, "llvm")
        if rec is not None:
            items.append(("tuned", rec.config))
    opt = MeasureOptions(parallel=1, threads=threads, build_timeout=300.0,
                         run_timeout=300.0, clock=clock)
    with LocalMeasurer(wl, "llvm", opt) as m:
        cmp = m.compare(items, ("numpy",), rounds)
    flops = get_template(template).flops(wl.args)
    shape = "x".join(map(str, args))
    parts = [f"{template} {shape} fp32, {threads} thread{'s' if threads > 1 else ''}:"]
    tn = cmp.timing("numpy")
    peak = peak * threads if peak else None
    parts.append(f"numpy {_gflops(flops, tn, peak)}" if tn else
                 f"numpy failed ({cmp.errors.get('numpy', ('', '?'))[1]})")
    for name, _ in items:
        tc = cmp.timing(name)
        if tc is None:
            parts.append(f"{name} failed ({cmp.errors.get(name, ('', '?'))[1][:80]})")
            continue
        ratio = cmp.ratio("numpy", name)
        parts.append(f"polytile {name} {_gflops(flops, tc, peak)}" +
                     (f", ratio {ratio:5.2f}" if ratio else ""))
    parts.append(f"[load {os.getloadavg()[0]:.2f}{', CPU time' if clock == 'cpu' else ''}]")
    return " ".join(parts[:1]) + " " + "; ".join(parts[1:])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES),
                    help="M,N,K shapes separated by ';'")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=4, help="A/B rounds per figure")
    ap.add_argument("--log", default=None, help="tuning log whose best records to add")
    ap.add_argument("--batch", action="store_true", help="add batch_matmul 8x256x256x256")
    ap.add_argument("--blis", action="store_true", help="add the blis loop order's config")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time by the processes' CPU time (a loaded machine; with "
                         "several threads their summed work, not the elapsed time)")
    ap.add_argument("--no-peak", action="store_true",
                    help="do not measure the FMA peak (nor print fractions of it)")
    a = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shapes.split(";") if s]
    work = [("matmul", s) for s in shapes] + ([("batch_matmul", (8, 256, 256, 256))]
                                               if a.batch else [])
    from polytile.autotune.blas import anchor_note

    desc, warn = anchor_note()
    print(f"numpy: {desc}")
    if warn:
        print(f"warning: {warn}")
    peak = None if a.no_peak else fma_peak()
    if peak:
        print(f"fma peak {peak / 1e9:.1f} GFLOP/s per core (cpu_ops.py's microkernel). "
              "Where numpy's own kernel runs near it (OpenBLAS SkylakeX on AVX-512: "
              "0.9-1.0 of peak), no kernel can be 1.1x numpy: the ratio to reach is 1.0")
    for template, args in work:
        for threads in (int(x) for x in a.threads.split(",")):
            print(bench(template, args, threads, a.rounds, a.log, a.blis, a.clock, peak),
                  flush=True)


if __name__ == "__main__":
    main()
