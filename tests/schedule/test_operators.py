"""Composite operators vs numpy under several schedules each (interpreter at tiny sizes, LLVM
at larger odd sizes), and differential tests: every schedule agrees with the unscheduled
build of the same compute on the same backend."""

from __future__ import annotations

import pytest
from helpers import check, run1
from operators import BUILDERS, SCHEDULES, SIZES

CASES = [(op, fn) for op, fns in SCHEDULES.items() for fn in fns]


def _workload(op, backend):
    return BUILDERS[op](*SIZES[op]["small" if backend == "interp" else "large"])


@pytest.mark.parametrize("op", sorted(BUILDERS))
def test_unscheduled_vs_numpy(op, backend):
    w = _workload(op, backend)
    w.check(w.schedule(), backend)


@pytest.mark.parametrize("op, sched", CASES, ids=[f"{o}-{f.__name__}" for o, f in CASES])
def test_scheduled_vs_numpy(op, sched, backend):
    w = _workload(op, backend)
    s = w.schedule()
    sched(w, s)
    w.check(s, backend)


@pytest.mark.parametrize("op, sched", CASES, ids=[f"{o}-{f.__name__}" for o, f in CASES])
def test_scheduled_vs_unscheduled(op, sched, backend):
    w = _workload(op, backend)
    s = w.schedule()
    sched(w, s)
    got = run1(s, w.args, w.inputs, backend)
    want = run1(w.schedule(), w.args, w.inputs, backend)
    # same backend, same data: only the order of the reduction differs
    check(got, want.astype("float64"), got.dtype.name, w.k)
