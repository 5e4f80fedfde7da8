"""Helper processes end with the tuner (:mod:`polytile.autotune.orphan`): a process
sleeping under ``exit_with_parent`` ends within a second of its parent's death (the cheap
case: the module loaded alone, and without the watchdog the orphan sleeps on); with
``-m slow``, a real build worker stuck in a build that hangs (the faulty template's
``hang`` mode) ends within a second or two of its tuner dying without closing it
(``os._exit``, as a tuner killed by ``timeout`` or SIGKILL)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

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


ORPHAN = os.path.join(HERE, "..", "..", "autotune", "orphan.py")

#: a child sleeping under exit_with_parent (argv[2] == "watch") or not
CHILD = r"""
import importlib.util
import sys
import time

if sys.argv[2] == "watch":
    spec = importlib.util.spec_from_file_location("orphan", sys.argv[1])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.exit_with_parent(0.1)
print("ready", flush=True)
time.sleep(60)
"""

#: a parent that starts CHILD, prints its pid once it is ready and ends at once
PARENT = r"""
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]],
                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, text=True)
p.stdout.readline()
print(p.pid, flush=True)
"""


@pytest.mark.parametrize("watch", [True, False])
def test_exit_with_parent(watch):
    """With the watchdog the orphan ends; without it, it sleeps on (the check can fail)."""
    p = subprocess.run([sys.executable, "-c", PARENT, CHILD, ORPHAN,
                        "watch" if watch else "no"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split()[-1])
    deadline = time.time() + (3 if watch else 1)
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, 9)
    assert alive != watch


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return "\nState:\tZ" not in fh.read()   # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.slow
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
