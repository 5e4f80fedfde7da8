"""Limits of ``unroll`` (cases B3 and F3): a loop too long to unroll, or whose expansion,
multiplied by the unrolled loops inside it, would exceed the statement budget, stays a loop
with a PolytileWarning naming the stage and loop; the build stays fast and the numbers
right."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings

import pytest
from helpers import check, lowered, rand, run1

from polytile import te
from polytile.errors import PolytileWarning
from polytile.schedule.passes.loops import MAX_UNROLL, MAX_UNROLL_STMTS


def _no_warnings(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolytileWarning)
        return fn(*args)


def _f3(nb=37):
    A = te.placeholder((nb, 9, 24), "int32", name="A")
    B = te.placeholder((nb, 24, 32), "int32", name="B")
    k = te.reduce_axis((0, 24), name="k")
    C = te.compute((nb, 9, 32), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    return A, B, C


#: Run in a child process with a time limit: a regression here means a build of minutes
#: (F3 took 90 to 266 s, B3 expanded 2**20 copies), which must fail, not stall the session.
CHILD = textwrap.dedent("""
    import time, warnings
    import numpy as np
    import polytile
    from polytile import te
    from polytile.errors import PolytileWarning
    {setup}
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", PolytileWarning)
        text = str(polytile.lower(s, args))
        f = polytile.build(s, args)
    took = time.perf_counter() - t0
    {check}
    print("\\n---\\n".join(str(w.message) for w in got if w.category is PolytileWarning))
    print("===", took)
    print(text)
""")


def _child(setup: str, check: str) -> tuple[list[str], float, str]:
    code = CHILD.format(setup=textwrap.dedent(setup).strip(),
                        check=textwrap.dedent(check).strip())
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    head, rest = r.stdout.split("=== ", 1)
    took, text = rest.split("\n", 1)
    return [m for m in head.strip().split("\n---\n") if m], float(took), text


def test_f3_nested_unrolls_keep_the_outer_loop_rolled():
    msgs, took, text = _child("""
        A = te.placeholder((37, 9, 24), "int32", name="A")
        B = te.placeholder((37, 24, 32), "int32", name="B")
        k = te.reduce_axis((0, 24), name="k")
        C = te.compute((37, 9, 32), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k),
                       name="C")
        s = te.create_schedule(C.op)
        b, i, j = C.op.axis
        s[C].unroll(j)
        s[C].unroll(b)
        args = [A, B, C]
    """, """
        g = np.random.default_rng(7)
        a = g.integers(-50, 50, (37, 9, 24)).astype("int32")
        bb = g.integers(-50, 50, (37, 24, 32)).astype("int32")
        c = np.full((37, 9, 32), -123456, "int32")
        f(a, bb, c)
        ref = np.einsum("bik,bkj->bij", a.astype("int64"), bb.astype("int64"))
        assert (c == ref).all()
    """)
    # one warning from lower, one from build (which lowers again)
    assert len(msgs) == 2 and msgs[0] == msgs[1] and re.fullmatch(
        r"unroll: unrolling loop 'b' of stage 'C' would copy its body of 328 statements 37 "
        r"times \(12136 statements, with the unrolled loop 'j' \(32 iterations\) inside\), "
        r"more than MAX_UNROLL_STMTS = 1024; 'b' is kept as a loop\n  hint: unroll a split "
        r"part of it: xo, xi = s\[C\]\.split\(b, factor=3\); s\[C\]\.unroll\(xi\)", msgs[0])
    assert took < 30, took
    assert "for b in range(0, 37)" in text and "for j in" not in text


def test_b3_unroll_of_two_to_the_twenty():
    msgs, took, text = _child("""
        n = 1 << 20
        A = te.placeholder((n,), name="A")
        B = te.compute(A.shape, lambda i: A[i] * 2, name="B")
        s = te.create_schedule(B.op)
        s[B].unroll(B.op.axis[0])
        args = [A, B]
    """, """
        a = np.random.default_rng(1).uniform(-1, 1, n).astype("float32")
        b = np.full_like(a, np.nan)
        f(a, b)
        assert (b == a * 2).all()
    """)
    assert msgs == 2 * ["unroll: loop 'i' of stage 'B' has 1048576 iterations, more than "
                        "MAX_UNROLL = 256; 'i' is kept as a loop\n  hint: unroll a split part "
                        "of it: xo, xi = s[B].split(i, factor=256); s[B].unroll(xi)"]
    assert took < 20, took
    assert "for i in range(0, 1048576):" in text


def _elementwise(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 - 1.0, name="B")
    return A, B


@pytest.mark.parametrize("n, warns", ((MAX_UNROLL, False), (MAX_UNROLL + 1, True)))
def test_unroll_extent_limit(n, warns, backend):
    A, B = _elementwise(n)
    s = te.create_schedule(B.op)
    s[B].unroll(B.op.axis[0])
    a = rand((n,), seed=2)
    if warns:
        with pytest.warns(PolytileWarning, match=f"has {n} iterations"):
            out = run1(s, [A, B], [a], backend)
    else:
        out = _no_warnings(run1, s, [A, B], [a], backend)
        assert "for i in" not in lowered(s, [A, B])
    check(out, a.astype("float64") * 3 - 1)


def _grid(shape):
    A = te.placeholder(shape, name="A")
    body = {3: lambda i, j, k: A[i, j, k] + 0.5,
            4: lambda i, j, k, l: A[i, j, k, l] + 0.5}[len(shape)]
    B = te.compute(shape, body, name="B")
    return A, B


@pytest.mark.parametrize("shape, rolled", (
    ((4, 16, 16), ""),          # 16, 256, then 1024 statements: exactly the budget
    ((5, 16, 16), "i"),         # 16, 256, then 1280: the outermost stays a loop
    ((5, 3, 7, 11), "i"),       # 11, 77, 231, then 1155
    ((2, 300, 2), "j"),         # j is too long by itself; i is unrolled around the loop
    ((3, 6, 90, 2), "j"),       # l, k: 180; j (1080) stays a loop, i (3 x (8 + 180)) not
    ((9, 6, 90, 2), "ij"),      # and i (9 x 188) stays a loop too
))
def test_nested_unrolls(shape, rolled, backend):
    names = "ijkl"[:len(shape)]
    A, B = _grid(shape)
    s = te.create_schedule(B.op)
    for iv in B.op.axis:
        s[B].unroll(iv)
    a = rand(shape, seed=3)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", PolytileWarning)
        text = lowered(s, [A, B])
        out = run1(s, [A, B], [a], backend)
    warned = {str(w.message).split("'")[1] for w in got
              if issubclass(w.category, PolytileWarning)}
    assert warned == set(rolled)
    for n in names:
        assert (f"for {n} in range" in text) == (n in rolled), (n, text)
    check(out, a.astype("float64") + 0.5)


def test_unrolled_body_size_counts_attached_stages(backend):
    """An unroll around stages computed inside it copies them too: 40 iterations of 8
    statements (7 attached stages and the consumer) exceed the budget."""
    A = te.placeholder((40, 5), name="A")
    prev, stages = A, []
    for k in range(7):
        p = prev
        prev = te.compute((40, 5), (lambda p: lambda i, j: p[i, j] * 1.5)(p), name=f"P{k}")
        stages.append(prev)
    C = te.compute((40, 5), lambda i, j: prev[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for st in stages:
        s[st].compute_at(s[C], C.op.axis[0])
    s[C].unroll(C.op.axis[0])
    a = rand((40, 5), seed=4)
    with pytest.warns(PolytileWarning, match=r"loop 'i' of stage 'C' would copy its body of "
                      r"\d+ statements 40 times"):
        out = run1(s, [A, C], [a], backend)
    check(out, a.astype("float64") * 1.5 ** 7 + 1)


def test_partial_tile_of_a_split_stays_a_loop_without_warning(backend):
    A, B = _elementwise(37)
    s = te.create_schedule(B.op)
    _, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].unroll(ii)
    a = rand((37,), seed=5)
    out = _no_warnings(run1, s, [A, B], [a], backend)
    check(out, a.astype("float64") * 3 - 1)


def test_budget_constants_are_documented():
    from polytile.schedule.stage import Stage

    assert "MAX_UNROLL_STMTS" in Stage.unroll.__doc__ and "MAX_UNROLL" in Stage.unroll.__doc__
    assert MAX_UNROLL_STMTS >= MAX_UNROLL >= 16

