"""``ib.let`` and ``ib.while_loop`` of TVM's ``tir.ir_builder`` in the code of a
``te.extern``, on llvm and in CUDA C (printed, compiled by nvcc): a data-dependent loop
(the number of halvings until a value drops below 1) and a value bound once and read
in a loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

import polytile
from polytile import te, tir
from polytile.errors import DefinitionTypeError, DefinitionValueError
from tests.helpers import compile_with_nvcc


def halvings(n, dtype="float64"):
    """``C[i] = number of times A[i] is halved before it is < 1``, ``D[i] = A[i] * s``
    with ``s = 0.5 ** C[i]`` bound by ``let`` (``A[i]`` finite and positive)."""
    A = te.placeholder((n,), name="A", dtype=dtype)

    def gen(ins, outs):
        ib = tir.ir_builder.create()
        a, c = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, n, name="i") as i:
            x = ib.allocate(dtype, (1,), name="x", scope="local")
            k = ib.allocate("int32", (1,), name="k", scope="local")
            x[0] = a[i]
            k[0] = 0
            with ib.while_loop(x[0] >= 1.0):
                half = ib.let("half", x[0] * 0.5)
                x[0] = half
                k[0] = k[0] + 1
            c[i] = k[0].astype(dtype)
        return ib.get()

    C = te.extern((n,), [A], gen, name="C", dtype=dtype)
    return A, C


def _expected(a):
    out = []
    for x in a:
        k = 0
        while x >= 1.0:
            x *= 0.5
            k += 1
        out.append(k)
    return np.array(out, dtype=a.dtype)


@pytest.mark.parametrize("n", [1, 17])
def test_while_loop_and_let_in_extern_code(n):
    A, C = halvings(n)
    s = te.create_schedule(C.op)
    f = polytile.build(s, [A, C], "llvm")
    a = np.random.default_rng(n).uniform(0.01, 1e6, n)
    a[0] = 0.5                                   # no iteration at all
    c = np.full(n, np.nan)
    f(a, c)
    np.testing.assert_array_equal(c, _expected(a))
    assert c[0] == 0 and (n == 1 or c.max() == math.floor(math.log2(a.max())) + 1)


def test_while_loop_prints_and_compiles_in_cuda_c():
    A, C = halvings(64, "float32")
    s = te.create_schedule(C.op)
    src = polytile.build(s, [A, C], target="cuda").get_source()
    assert "while (" in src and "half" in src
    compile_with_nvcc(src)


def test_ir_builder_statement_text():
    ib = tir.ir_builder.create()
    n = te.var("n")
    v = ib.let("v", n * 2)
    with ib.while_loop(v > 3):
        ib.emit(tir.call_extern("int32", "tick", v))
    text = str(ib.get())
    assert v.dtype == "int32" and "v = (n * 2)" in text and "while (v > 3):" in text
    w = te.var("w", "int64")
    assert ib.let(w, n) is w                    # a te.var keeps its dtype; value cast


def test_let_and_while_loop_refuse_bad_arguments():
    ib = tir.ir_builder.create()
    with pytest.raises(DefinitionTypeError, match="ir_builder.while_loop: condition .* has "
                       "dtype float32; expected a bool expression"):
        with ib.while_loop(te.var("x", "float32")):
            pass
    with pytest.raises(DefinitionTypeError, match="ir_builder.let: variable 3; expected a "
                       "name or a te.var"):
        ib.let(3, 1)


def test_likely_scope_attr_and_pointer():
    ib = tir.ir_builder.create()
    n = te.var("n")
    assert ib.likely(n > 1) is not None
    with pytest.raises(DefinitionValueError, match=r"(?s)ir_builder.scope_attr: attribute "
                       r"'thread_extent' of .*runs in one thread.*hint: .*bind"):
        ib.scope_attr(te.thread_axis("threadIdx.x"), "thread_extent", 64)
    with pytest.raises(DefinitionValueError, match="ir_builder.pointer: a raw float32 "
                       r"pointer 'p'; expected ib.allocate"):
        ib.pointer("float32", name="p")
