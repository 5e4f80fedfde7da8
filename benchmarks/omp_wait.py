"""Benchmark: the cost of OpenMP's spin-wait when another process keeps a core busy.

libgomp's threads wait at the end of a parallel region (and for the next one) by spinning
for ``GOMP_SPINCOUNT`` iterations (300,000 when ``OMP_WAIT_POLICY`` is unset) before they
sleep. On a machine whose cores are shared (a build worker, another user), a spinning
thread takes the core from the thread that still has work, and a kernel of several short
parallel regions slows down many times over. ``OMP_WAIT_POLICY=passive`` makes waiting
threads sleep at once; polytile's runtime sets it before libgomp is loaded unless the
user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (see
:func:`polytile.targets.llvm.runtime.omp_environment`).

For each wait policy (libgomp's default spin, written ``GOMP_SPINCOUNT=300000``, and
``passive``) and each load (the machine as it is, and with one extra busy-looping process
per core but one), a fresh process builds a row softmax of M x N with its four stages
parallel over rows (four parallel regions a call), runs it with all cores' threads and
prints the median time and spread (:mod:`polytile.autotune.timing`). Run:
``python benchmarks/omp_wait.py [--size 512,2048]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

POLICIES = {"spin (libgomp default)": {"GOMP_SPINCOUNT": "300000"},
            "passive": {"OMP_WAIT_POLICY": "passive"}}


def child(m: int, n: int) -> None:
    from polytile.autotune import get_template
    from polytile.autotune.data import make_inputs
    from polytile.autotune.timing import time_function
    import polytile

    t = get_template("softmax")
    space = t.space((m, n))
    knobs = space.default().knob_values()
    knobs["fuse_rows"] = False  # four stages, each its own parallel region
    s, tensors = t.instantiate(space.from_json(knobs), (m, n), "float32")
    f = polytile.build(s, tensors, target="llvm")
    arrays = make_inputs(tensors)
    tm = time_function(lambda: f(*arrays), min_repeat_ms=20, min_repeats=7, budget_s=1.0)
    print(json.dumps({"median": tm.median, "spread": tm.spread, "min": tm.min,
                      "remeasured": tm.remeasured}))


def run(env_extra: dict, busy: int, m: int, n: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(busy)]
    try:
        p = subprocess.run([sys.executable, __file__, "--child", f"{m},{n}"], env=env,
                           capture_output=True, text=True, timeout=600)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    if p.returncode:
        raise SystemExit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="512,2048")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*map(int, a.child.split(",")))
        return
    m, n = map(int, a.size.split(","))
    cores = os.cpu_count() or 1
    print(f"softmax({m}, {n}) float32, 4 parallel regions a call, {cores} threads; "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    rows = {}
    for busy in (0, max(1, cores - 1)):
        for name, env in POLICIES.items():
            r = run(env, busy, m, n)
            rows[(busy, name)] = r
            print(f"  extra busy processes {busy}  {name:<24} median {r['median'] * 1e3:8.3f} ms"
                  f"  spread {r['spread'] * 100:5.1f} %  min {r['min'] * 1e3:8.3f} ms"
                  f"{'  (re-measured)' if r['remeasured'] else ''}", flush=True)
        spin = rows[(busy, "spin (libgomp default)")]["median"]
        pas = rows[(busy, "passive")]["median"]
        print(f"  extra busy processes {busy}  spin / passive = {spin / pas:.2f}")


if __name__ == "__main__":
    main()
