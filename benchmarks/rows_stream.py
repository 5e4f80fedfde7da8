"""Benchmark: the GPU row templates' output stores as ordinary stores against streaming
ones (the ``nontemporal`` pragma on the output's vector loop: PTX ``st.global.cs``), the
same kernel otherwise, timed side by side in one process.

Each (workload, dtype, layout) is built twice from one config (the second schedule gets
the pragma), both outputs are checked against numpy in float64, then both are timed by
``time_evaluator`` (``--number`` back-to-back calls, median of ``--repeat``, the two
variants alternating ``--rounds`` times) on rows large enough (default 16384 x 4096) that
the 50 MiB L2 cache of an H200 holds little of one call's data when the next starts.
Prints the median times, bandwidth (bytes read + written over the time) against the
measured copy bound, and the ratio of the two variants. Run on the GPU machine::

    python benchmarks/rows_stream.py --workloads layernorm softmax --dtypes float16

H200, 2026-12-02 (``--workloads layernorm --dtypes float16 --layouts 256,8,1,2,1
256,8,1,3,1 --number 10 --repeat 3 --rounds 2``, copy bound 4.19 TB/s): 16384 x 4096,
default layout plain 0.0679 ms = 0.942x the copy bound, streaming 0.0682 ms (plain /
stream 0.996); gamma and beta in registers 0.0684 both (0.999). No gain: the row
templates keep ordinary stores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tune_gpu import WORKLOADS, _copy_bandwidth  # noqa: E402


def _build(t, cfg, args, dtype, stream: bool):
    import polytile

    s, tensors = t.instantiate(cfg, args, dtype, "cuda")
    out = tensors[-1]
    if stream:   # the output's vector loop (the innermost): its stores stream
        s[out].pragma(s[out].leaf_iter_vars[-1], "nontemporal")
    f = polytile.build(s, tensors, target="cuda")
    return f, tensors, "st_cs" in f.get_source()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["layernorm", "softmax"],
                    choices=("softmax", "layernorm", "rmsnorm"))
    ap.add_argument("--dtypes", nargs="+", default=["float16"], choices=("float32", "float16"))
    ap.add_argument("--args", default="16384,4096", help="M,N (default 16384,4096)")
    ap.add_argument("--layouts", nargs="*", default=[],
                    help="layouts as threads,vec,rows,shared,local (default: the default)")
    ap.add_argument("--number", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    import numpy as np

    import polytile
    from polytile.autotune.data import make_inputs, output_positions
    from polytile.autotune.template import get_template

    copy = _copy_bandwidth()
    print(f"device copy bandwidth (torch copy_ of 1 GiB, median of 20): {copy:.2f} TB/s")
    args = tuple(int(x) for x in a.args.split(","))
    for name in a.workloads:
        t = get_template(name)
        for dtype in a.dtypes:
            sp = t.space(args, dtype, "cuda")
            moved = WORKLOADS[name][1](*args, np.dtype(dtype).itemsize)
            lays = [[int(x) for x in s.split(",")] for s in a.layouts] or [
                sp.default().knob_values()["layout"]]
            for lay in lays:
                idx = next((k for k in range(len(sp))
                            if sp.get(k).knob_values()["layout"] == lay), None)
                if idx is None:
                    print(f"{name} {dtype} {lay}: not in the space")
                    continue
                runs, times, ref = {}, {}, None
                for stream in (False, True):
                    f, tensors, streams = _build(t, sp.get(idx), args, dtype, stream)
                    if ref is None:   # one set of inputs and one reference for both
                        arrays = make_inputs(tensors, 1, args)
                        o = output_positions(tensors)[0]
                        ref = t.reference(*[x.astype("float64") for k, x in
                                            enumerate(arrays) if k != o], args=args)
                    arrays[o][...] = np.nan
                    dev = [polytile.nd.array(x, device="cuda") for x in arrays]
                    f(*dev)
                    err = float(np.nanmax(np.abs(dev[o].numpy().astype("float64") - ref))
                                / max(np.abs(ref).max(), 1e-30))
                    bad = bool(np.isnan(dev[o].numpy()).any())
                    runs[stream] = (f.time_evaluator(number=a.number, repeat=a.repeat), dev)
                    times[stream] = []
                    print(f"{name}{args} {dtype} {lay} {'stream' if stream else 'plain '}: "
                          f"streaming stores in source: {streams}; max error / max |ref| "
                          f"{err:.2e}{'  NaN LEFT' if bad else ''}")
                for _ in range(a.rounds):
                    for stream in (False, True):
                        ev, dev = runs[stream]
                        times[stream].extend(ev(*dev).results)
                med = {k: statistics.median(v) for k, v in times.items()}
                for stream in (False, True):
                    bw = moved / med[stream] / 1e12
                    print(f"  {'stream' if stream else 'plain '} {med[stream] * 1e3:8.4f} ms "
                          f"(min {min(times[stream]) * 1e3:.4f})  {bw:5.2f} TB/s = "
                          f"{bw / copy:5.3f} x copy bound")
                print(f"  plain / stream time: {med[False] / med[True]:.3f}", flush=True)


if __name__ == "__main__":
    main()
