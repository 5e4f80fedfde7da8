"""``ib.allocate`` of TVM's ``tir.ir_builder`` in the code of a ``te.extern``: a scratch
array on the stack (constant small size), on the heap (large or symbolic size), or in a
nested scope; GPU source keeps it a per-thread array. TVM programs writing an extern's
code with a temporary raised ``AttributeError`` before."""

from __future__ import annotations

import numpy as np
import pytest

import polytile
from polytile import te, tir
from polytile.errors import DefinitionValueError


def reversed_double(n, scope: str = ""):
    """``C[i] = 2 * A[n - 1 - i]`` through a scratch array written then read reversed."""
    A = te.placeholder((n,), name="A", dtype="float64")

    def gen(ins, outs):
        ib = tir.ir_builder.create()
        a, c = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, 1, name="once"):   # allocated in a nested scope
            tmp = ib.allocate("float64", (n,), name="tmp", scope=scope)
            with ib.for_range(0, n, name="i") as i:
                tmp[i] = a[i] * 2.0
            with ib.for_range(0, n, name="j") as j:
                c[j] = tmp[n - 1 - j]
        return ib.get()

    C = te.extern((n,), [A], gen, name="C", dtype="float64")
    return A, C


@pytest.mark.parametrize("n", [1, 7, 9001], ids=["one", "prime", "heap-sized"])
def test_allocate_in_extern_code(n):
    A, C = reversed_double(n)
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, C], "llvm")
    a = np.random.default_rng(n).uniform(0.5, 2.0, n)
    c = np.full(n, np.nan)
    f(a, c)
    np.testing.assert_allclose(c, 2.0 * a[::-1], rtol=1e-15)


def test_allocate_of_symbolic_size_is_on_the_heap():
    n = te.var("n")
    A, C = reversed_double(n)
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, C], "llvm")
    for m in (1, 13, 100003):
        a = np.random.default_rng(m).uniform(0.5, 2.0, m)
        c = np.full(m, np.nan)
        f(a, c)
        np.testing.assert_allclose(c, 2.0 * a[::-1], rtol=1e-15)


def test_allocate_lives_after_the_call_in_its_scope():
    ib = tir.ir_builder.create()
    with ib.for_range(0, 4, name="i"):
        t = ib.allocate("float32", 8, name="t", scope="local")
        t[0] = 1.0
    text = str(ib.get())
    assert text.index("for i") < text.index("t") and "stack" in repr(t._view.buffer)


def test_allocate_in_cuda_extern_is_a_thread_array():
    A, C = reversed_double(64, scope="local")
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, C], "cuda")
    src = f.imported_modules[0].get_source()
    assert "double tmp[64];" in src


@pytest.mark.parametrize("kwargs, match", [
    ({"scope": "texture"}, r"ir_builder.allocate: scope 'texture' of buffer 'b'; expected"),
    ({"shape": (4, 0)}, r"ir_builder.allocate: buffer 'b' has extent 0 in shape \[4, 0\]"),
])
def test_allocate_refusals(kwargs, match):
    ib = tir.ir_builder.create()
    args = {"dtype": "float32", "shape": (4,), "name": "b", **kwargs}
    with pytest.raises(DefinitionValueError, match=match):
        ib.allocate(**args)


def test_inlining_the_input_of_an_extern_is_refused_naming_both():
    # was a tensorize error at lowering comparing "(A[B_0] * 2.0f)" with "B[B_0]"
    from polytile.errors import ScheduleError

    n = 9
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")

    def gen(ins, outs):
        ib = tir.ir_builder.create()
        a, c = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, n, name="i") as i:
            c[i] = a[i] + 1.0
        return ib.get()

    E = te.extern((n,), [B], gen, name="E", dtype="float32")
    s = te.create_schedule(E.op)
    with pytest.raises(ScheduleError, match=r"compute_inline: stage 'B' is read by the "
                       r"te.extern 'E', whose external code reads its array"):
        s[B].compute_inline()
    f = polytile.build(s, [A, E])      # the schedule is unchanged and still builds
    a, e = np.arange(1.0, n + 1, dtype="float32"), np.full(n, np.nan, "float32")
    f(a, e)
    np.testing.assert_array_equal(e, a * 2 + 1)


def test_compute_at_of_an_extern_names_compute_at():
    from polytile.errors import ScheduleError

    A, E = reversed_double(12)
    D = te.compute((12,), lambda i: E[i] * 3.0, name="D")
    s = te.create_schedule(D.op)
    xo, _ = s[D].split(D.op.axis[0], factor=4)
    s[E].compute_at(s[D], xo)
    with pytest.raises(ScheduleError, match=r"^compute_at: stage 'C' is a te.extern"):
        polytile.lower(s, [A, D])
