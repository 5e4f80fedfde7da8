"""Helper processes end with the tuner: a build worker stuck in a build that hangs (the
faulty template's ``hang`` mode) ends within a second or two of its tuner dying without
closing it (``os._exit``, as a tuner killed by ``timeout`` or SIGKILL), instead of
sleeping on (:mod:`polytile.autotune.orphan`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(HERE, "faulty_template.py") + ":faulty"

TUNER = r"""
import os, sys, threading, time
from polytile.autotune import MeasureOptions
from polytile.autotune.data import resolve
from polytile.autotune.measure import LocalMeasurer
from polytile.autotune.tune import open_target, tunable_target

t, wl = resolve(sys.argv[1], (16,), "float32")
opt = MeasureOptions(parallel=1, build_timeout=600.0)
tgt, runner, _, _, space = open_target(t, wl, tunable_target("llvm"), opt)
hang = next(k for k in range(len(space)) if space.get(k).knob_values()["mode"] == "hang")
m = LocalMeasurer(wl, tgt, opt, runner=runner)
m.start()
threading.Thread(target=m.measure, args=([(hang, space.get(hang).knob_values())], None),
                 daemon=True).start()
time.sleep(1.5)   # the worker is in the hanging build
print(" ".join(str(p.proc.pid) for p in m._procs), flush=True)
os._exit(0)       # no close: as a tuner killed by a signal
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()   # a zombie has ended
    except FileNotFoundError:
        return False


def test_a_worker_in_a_hanging_build_ends_with_its_tuner():
    p = subprocess.run([sys.executable, "-c", TUNER, FAULTY], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    pids = [int(x) for x in p.stdout.split()]
    assert pids
    deadline = time.time() + 10
    while any(_alive(q) for q in pids) and time.time() < deadline:
        time.sleep(0.1)
    left = [q for q in pids if _alive(q)]
    for q in left:   # do not leave it behind if the check fails
        os.kill(q, 9)
    assert not left, f"worker(s) {left} outlived their tuner"
