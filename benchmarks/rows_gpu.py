"""Benchmark: chosen ``layout`` configs of the GPU row templates (softmax, layernorm,
rmsnorm) timed side by side with torch, without a search.

Each config is built once and timed by the tuner's own measurer
(:meth:`polytile.autotune.measure.LocalMeasurer.compare`: the GPU runner process, CUDA
events, inputs rotated over buffer sets larger than the L2 cache, 4 rounds alternating with
torch on the GPU), so the figures compare with ``benchmarks/tune_gpu.py``'s. By default the
configs are the template's default, the rows-in-registers layouts (``layout`` ``shared`` =
2, and 3 where layernorm's gamma and beta are kept in registers too) of 64 to 256 threads
with 16-byte vectors (with and without ``local`` statistics), and the best layouts of
earlier tuning runs on the H200.

Run on the GPU machine::

    python benchmarks/rows_gpu.py --workloads layernorm softmax --dtypes float16 float32 \
        --measure-copy
    python benchmarks/rows_gpu.py --workloads layernorm --dtypes float16 \
        --layouts 128,8,1,2,1 128,4,1,0,0
    python benchmarks/rows_gpu.py --workloads layernorm --dtypes float16 --only --no-alt \
        --measure-copy --variants affine=0,scalars=0,hints=0,stores=0 stores=0

One line per config: median time, spread, bandwidth (bytes read + written over the time)
against the copy bound, the ratio to torch. Each layout is timed with every value of the
template's other knobs (layernorm's ``stats``: mean and variance in two passes, or the
one-pass shifted sums).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tune_gpu import WORKLOADS, _copy_bandwidth  # noqa: E402

#: earlier tuning winners on the H200 (4096 x 4096), timed beside the register layouts
EARLIER = {("layernorm", "float16"): [[128, 4, 1, 0, 0]],
           ("softmax", "float16"): [[128, 4, 4, 0, 0]]}


def _layouts(space, name: str, dtype: str, extra: list, only: bool = False,
             fix: dict | None = None, alt: bool = True, variants=None) -> list:
    """``[(label, knob values)]``: the default, the 16-byte register layouts (not with
    ``only``), ``extra``, the default with the knob values of each of ``variants``
    (``[{knob: value}]``); each with every value of the other knobs (with ``alt``), or
    only the value ``fix`` gives a knob (``{name: str(value)}``; knobs the template lacks
    are ignored)."""
    allv = [space.get(k).knob_values() for k in range(len(space))]
    default = space.default().knob_values()
    vec16 = max(v["layout"][1] for v in allv)
    out = [("default", default)]
    for v in ([] if only else allv):
        th, vec, rows, shared, _ = v["layout"]
        if shared >= 2 and vec == vec16 and (rows == 1 and 64 <= th <= 256
                                             or rows == 4 and th == 64):
            out.append(("registers" if shared == 2 else "regs+params", v))
    # --only: the default and the given layouts, as its help says
    for lay in extra or ([] if only else EARLIER.get((name, dtype), [])):
        v = next((v for v in allv if v["layout"] == lay), None)
        if v is None:
            print(f"  layout {lay} is not in the space of {name} {dtype}: skipped")
        else:
            out.append(("given", v))
    # --variants: the default with some knobs changed (a knob the template lacks: skipped)
    for var in variants or []:
        want = {**default, **{n: v for n, v in var.items() if n in default}}
        v = next((v for v in allv if v == want), None)
        if v is None:
            print(f"  variant {var} is not in the space of {name} {dtype}: skipped")
        elif v != default:
            out.append(("variant", v))
    # every value of the other knobs (layernorm's ``stats``: two passes or one) per layout
    others = {n for v in allv for n in v if n != "layout"}
    seen, uniq = set(), []
    for label, v0 in out:
        for v in [v0] + [w for w in allv if alt and w["layout"] == v0["layout"] and w != v0]:
            if any(n in v and str(v[n]) != x for n, x in (fix or {}).items()):
                continue
            key = (tuple(v["layout"]), *sorted((n, str(v[n])) for n in others))
            if key not in seen:
                seen.add(key)
                knobs = "".join(f" {n}={v[n]}" for n in sorted(others))
                uniq.append((f"{label if v is v0 else 'alt'} {list(v['layout'])}{knobs}", v))
    return uniq


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["layernorm", "softmax"],
                    choices=("softmax", "layernorm", "rmsnorm"))
    ap.add_argument("--dtypes", nargs="+", default=["float16", "float32"],
                    choices=("float32", "float16"))
    ap.add_argument("--args", default="4096,4096", help="M,N (default 4096,4096)")
    ap.add_argument("--layouts", nargs="*", default=[],
                    help="extra layouts to time, as threads,vec,rows,shared,local")
    ap.add_argument("--only", action="store_true",
                    help="time the default and --layouts only (not every register layout)")
    ap.add_argument("--fix", nargs="*", default=[], metavar="KNOB=VALUE",
                    help="time only the configs with these values of the other knobs "
                    "(e.g. occupancy=0 stats=1; a knob a template lacks is ignored)")
    ap.add_argument("--no-alt", action="store_true",
                    help="time each layout with its own config only, not with every value "
                    "of the other knobs")
    ap.add_argument("--variants", nargs="*", default=[], metavar="KNOB=VALUE[,KNOB=VALUE]",
                    help="also time the default with these knob values (layout as "
                    "threads/vec/rows/shared/local), e.g. scalars=1 scalars=1,affine=1")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--target", default="cuda",
                    help="target string, e.g. 'cuda -min-blocks=8' (default cuda)")
    ap.add_argument("--copy-tbs", type=float, default=4.16)
    ap.add_argument("--measure-copy", action="store_true")
    a = ap.parse_args(argv)
    if a.measure_copy:
        a.copy_tbs = _copy_bandwidth()
        print(f"device copy bandwidth (torch copy_ of 1 GiB, median of 20): "
              f"{a.copy_tbs:.2f} TB/s")
    from polytile.autotune import MeasureOptions
    from polytile.autotune.anchors import available
    from polytile.autotune.data import resolve
    from polytile.autotune.measure import LocalMeasurer
    from polytile.autotune.tune import open_target, tunable_target

    args = tuple(int(x) for x in a.args.split(","))
    extra = [[int(x) for x in s.split(",")] for s in a.layouts]
    fix = dict(kv.split("=", 1) for kv in a.fix)
    variants = [{n: [int(x) for x in v.split("/")] if n == "layout" else int(v)
                 for n, v in (kv.split("=", 1) for kv in var.split(","))}
                for var in a.variants]
    for name in a.workloads:
        for dtype in a.dtypes:
            t, wl = resolve(name, args, dtype)
            moved = WORKLOADS[name][1](*args, 2 if dtype == "float16" else 4)
            opt = MeasureOptions(parallel=os.cpu_count() or 1)
            # the runner reads the device: the -arch and the limits that bound the space
            tgt, runner, _, _, space = open_target(t, wl, tunable_target(a.target), opt)
            items = _layouts(space, name, dtype, extra, a.only, fix, not a.no_alt, variants)
            anchors = tuple(available(t, args, "cuda"))
            with LocalMeasurer(wl, tgt, opt, runner=runner) as m:
                cmp = m.compare(items, anchors, a.rounds)
            print(f"{name}{args} {dtype} ({tgt}): copy bound {moved / a.copy_tbs / 1e9:.4f} ms")
            ref = cmp.timing("torch-cuda") if anchors else None
            for label in [n for n, _ in items] + list(anchors):
                tm = cmp.timing(label)
                if tm is None:
                    err = cmp.errors.get(label, ("", "not timed"))
                    print(f"  {label:44s} failed: {err[1][:160]}")
                    continue
                bw = moved / tm.median / 1e12
                line = (f"  {label:44s} {tm.median * 1e3:8.4f} ms ± {tm.spread * 100:4.1f} %"
                        f"  {bw:5.2f} TB/s = {bw / a.copy_tbs:5.2f} x copy bound")
                if ref is not None and label != "torch-cuda":
                    line += f"  {ref.median / tm.median:6.3f} x torch"
                print(line, flush=True)


if __name__ == "__main__":
    main()
