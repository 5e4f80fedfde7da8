"""Intermediates on the stack stay within a budget per native frame (case B4 of
shared/cases/bounds-and-limits.md): the function and each parallel-loop body put at most
``STACK_BUDGET_BYTES`` of buffers on the stack; the others go to the heap.

Runs that used to overflow a stack run in a subprocess: a regression kills the child, not
the test session. The child checks its numbers against numpy with a poisoned output.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from helpers import lowered

from polytile import te
from polytile.targets.llvm import CPU_LIMITS

# the stack limits of 'llvm' targets (every CPU target has the same)
STACK_BUDGET_BYTES = CPU_LIMITS.stack_frame_bytes
STACK_LIMIT_BYTES = CPU_LIMITS.stack_buffer_bytes

CHILD = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import polytile
    from polytile import te

    def chain(n, rows, cols, parallel):
        X = te.placeholder((rows, cols), name="X")
        prev, stages = X, []
        for k in range(n):
            p = prev
            prev = te.compute((rows, cols), (lambda p: lambda i, j: p[i, j] + 1.0)(p),
                              name=f"S{{k}}")
            stages.append(prev)
        out = te.compute((rows, cols), lambda i, j: prev[i, j] * 1.0, name="O")
        s = te.create_schedule(out.op)
        for st in stages:
            s[st].compute_at(s[out], out.op.axis[0])
        if parallel:
            s[out].parallel(out.op.axis[0])
        return polytile.build(s, [X, out])

    f = chain({n}, {rows}, {cols}, {parallel})
    x = np.random.default_rng(0).uniform(-1, 1, ({rows}, {cols})).astype("float32")
    o = np.full_like(x, np.nan)
    def call():
        f(x, o)
    if {thread_stack}:
        threading.stack_size({thread_stack})
        t = threading.Thread(target=call)
        t.start(); t.join()
    else:
        call()
    err = float(np.abs(o.astype("float64") - (x.astype("float64") + {n})).max())
    print("OK", err)
""")


def _run_child(n, rows, cols, *, parallel=False, thread_stack=0, env=None):
    code = CHILD.format(n=n, rows=rows, cols=cols, parallel=parallel,
                        thread_stack=thread_stack)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, f"child died with status {r.returncode}: {r.stderr[-2000:]}"
    ok, err = r.stdout.split()
    assert ok == "OK" and float(err) < 1e-4, r.stdout


def test_b4_140_intermediates_of_64_kib():
    """The case: 140 stages of (4, 16384) float32 computed at the output's first axis
    (8.75 MiB of 64 KiB buffers) used to die with SIGSEGV."""
    _run_child(140, 4, 16384)


def test_b4_inside_a_parallel_loop_on_small_worker_stacks():
    """The same inside a parallel loop, on OpenMP workers with 256 KiB stacks: 12 private
    buffers of 64 KiB (768 KiB) per task."""
    import os

    env = {**os.environ, "OMP_STACKSIZE": "256K", "OMP_NUM_THREADS": "2"}
    _run_child(12, 4, 16384, parallel=True, env=env)


def test_b4_called_from_a_thread_with_a_small_stack():
    _run_child(24, 3, 16384, thread_stack=512 * 1024)


def _chain_schedule(n, rows, cols, parallel=False):
    X = te.placeholder((rows, cols), name="X")
    prev, stages = X, []
    for k in range(n):
        p = prev
        prev = te.compute((rows, cols), (lambda p: lambda i, j: p[i, j] + 1.0)(p), name=f"S{k}")
        stages.append(prev)
    out = te.compute((rows, cols), lambda i, j: prev[i, j] * 1.0, name="O")
    s = te.create_schedule(out.op)
    for st in stages:
        s[st].compute_at(s[out], out.op.axis[0])
    if parallel:
        s[out].parallel(out.op.axis[0])
    return s, [X, out]


def _allocs(text):
    """(name, bytes, scope, indentation) of each float32 alloc of a lowered text."""
    out = []
    for m in re.finditer(r"^( *)(\w+) = alloc\(float32\[([\d, ]+)\], scope='(\w+)'\)", text,
                         re.M):
        n = 1
        for d in m.group(3).split(","):
            n *= int(d)
        out.append((m.group(2), 4 * n, m.group(4), len(m.group(1))))
    return out


@pytest.mark.parametrize("parallel", (False, True))
def test_stack_use_per_frame_stays_within_the_budget(parallel):
    s, args = _chain_schedule(20, 3, 4096, parallel)    # 20 buffers of 16 KiB
    allocs = _allocs(lowered(s, args))
    assert len(allocs) == 20
    stack = [a for a in allocs if a[2] == "stack"]
    assert sum(a[1] for a in stack) <= STACK_BUDGET_BYTES
    assert len(stack) == STACK_BUDGET_BYTES // (16 * 1024)
    assert all(a[2] == "heap" for a in allocs if a not in stack)
    # privatised buffers sit in the parallel loop's body, the others at the function's top
    assert {a[3] for a in allocs} == ({4} if parallel else {2})


def test_small_buffers_are_preferred_for_the_stack():
    sizes = [16384, 64, 16384, 128, 16384, 16384, 32]     # floats per row
    X = te.placeholder((2, 16384), name="X")
    stages = [te.compute((2, n), (lambda k: lambda i, j: X[i, j] * float(k))(k), name=f"S{k}")
              for k, n in enumerate(sizes)]

    def total(i, j):
        acc = stages[0][i, j]
        for st, n in zip(stages[1:], sizes[1:]):
            acc = acc + st[i, j % n]
        return acc

    out = te.compute((2, 16384), total, name="O")
    s = te.create_schedule(out.op)
    for st in stages:
        s[st].compute_at(s[out], out.op.axis[0])
    scopes = {name: (nbytes, scope) for name, nbytes, scope, _ in _allocs(lowered(s, [X, out]))}
    assert {k: scopes[f"S{k}"][0] for k in range(7)} == {k: 4 * n for k, n in enumerate(sizes)}
    # the three small ones first, then 64 KiB buffers while the budget lasts
    assert [scopes[f"S{k}"][1] for k in (1, 3, 6)] == ["stack"] * 3
    big = [scopes[f"S{k}"][1] for k in (0, 2, 4, 5)]
    assert big == ["stack"] * (big.count("stack")) + ["heap"] * big.count("heap")
    assert sum(b for b, sc in scopes.values() if sc == "stack") <= STACK_BUDGET_BYTES
    assert big.count("heap") >= 2
