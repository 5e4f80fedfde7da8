"""``te.extern`` with several outputs of different dtypes (a float32 and an int32 output
of one C function, issue 9): one stage with one flat output per dtype, the code getting
one typed view per output. Numeric results against numpy at odd sizes, poisoned
outputs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand

import polytile
from polytile import te, tir

MIXED = r"""
#include <stdint.h>
int mixed(const float* a, float* x, int32_t* k, double* d, float* y, int n) {
  for (int i = 0; i < n; ++i) {
    x[i] = a[i] * 2.0f;
    k[i] = (int32_t)(a[i] * 100.0f) + i;
  }
  for (int r = 0; r < 3; ++r) d[r] = (double)a[r] + 0.25;
  for (int r = 0; r < 2; ++r) for (int c = 0; c < 3; ++c) y[r * 3 + c] = a[c] - r;
  return 0;
}
"""


def _mixed(n, A, name="E"):
    return te.extern([(n,), (n,), (3,), (2, 3)], [A], lambda ins, outs: tir.call_extern(
        "int32", "mixed", ins[0].access_ptr("r"), *[o.access_ptr("w") for o in outs], n),
        dtype=["float32", "int32", "float64", "float32"], name=name)


@pytest.mark.parametrize("symbolic", [False, True])
def test_extern_outputs_of_different_dtypes(symbolic):
    n0 = 13
    n = te.var("n") if symbolic else n0
    A = te.placeholder((n,), name="A")
    X, K, D, Y = _mixed(n, A)
    assert [t.dtype for t in (X, K, D, Y)] == ["float32", "int32", "float64", "float32"]
    assert [t.name for t in (X, K, D, Y)] == ["E.v0", "E.v1", "E.v2", "E.v3"]
    # a consumer mixing two of them, inlined and not
    S = te.compute((n,), lambda i: X[i] + K[i].astype("float32"), name="S")
    s = te.create_schedule([S.op, D.op, Y.op])
    packed = s[X].op.input_tensors[0]
    s[packed].pragma(packed.op.axis[0], "import_c", MIXED)
    s[X].compute_inline()
    a = rand((n0,), seed=5)
    outs = [np.full(n0, np.nan, "float32"), np.full(n0, -7, "int32"),
            np.full(3, np.nan, "float64"), np.full((2, 3), np.nan, "float32")]
    polytile.build(s, [A, S, K, D, Y])(a, *outs)
    k = (a * np.float32(100)).astype("int32") + np.arange(n0, dtype="int32")
    check(outs[0], a.astype("float64") * 2 + k)
    np.testing.assert_array_equal(outs[1], k)
    check(outs[2], a[:3].astype("float64") + 0.25)
    check(outs[3], a[None, :3].astype("float64") - np.arange(2)[:, None])


def test_extern_outputs_of_different_dtypes_refusals():
    from polytile.errors import DefinitionValueError
    A = te.placeholder((8,), name="A")
    with pytest.raises(DefinitionValueError, match=r"extern: 'E': 2 outputs and 3 dtypes; "
                       r"one dtype, or one per output"):
        te.extern([(8,), (8,)], [A], lambda ins, outs: tir.call_extern(
            "int32", "f", ins[0].access_ptr("r")), dtype=["float32", "int32", "int8"],
            name="E")
    n = te.var("n")
    with pytest.raises(DefinitionValueError, match=r"extern: 'E': output of the shape \(3, n\) "
                       r"has the symbolic extent n after its first axis"):
        te.extern([(3, n), (4,)], [A], lambda ins, outs: tir.call_extern(
            "int32", "f", ins[0].access_ptr("r")), dtype=["float32", "int32"], name="E")
