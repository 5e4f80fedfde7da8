"""A node the elements of a tuple reduction share (the shifted value ``d`` of a sum and a
sum of squares) stays one node through ``rfactor`` and ``cache_write`` (all bodies
substituted by one walker), and the share pass binds it once before the tuple update's
lets (a chain of lets is one statement): the update evaluates ``d`` once, not once per
element (CUDA: cuda_fp16's half-to-float conversion is inline assembly nvcc does not
merge). Values against float64 numpy on the LLVM backend, odd sizes, outputs poisoned."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check, poison

import polytile
from polytile import te

SUM2 = te.comm_reducer(lambda x, y: (x[0] + y[0], x[1] + y[1]),
                       lambda t0, t1: (te.const(0, t0), te.const(0, t1)), name="sum2")


def _moments(m: int, n: int, how: str):
    A = te.placeholder((m, n), name="A", dtype="float16")
    k = te.reduce_axis((0, n), name="k")

    def body(i):
        d = A[i, k].astype("float32") - te.const(0.5, "float32")
        return SUM2((d, d * d), axis=k)

    s1, s2 = te.compute((m,), body, name="mom")
    s = te.create_schedule(s1.op)
    if how == "rfactor":
        ko, ki = s[s1].split(s1.op.reduce_axis[0], factor=4)
        s.rfactor(s1, ki)
    elif how == "cache_write":
        s.cache_write([s1, s2], "local")
    return s, [A, s1, s2]


@pytest.mark.parametrize("how", ["plain", "rfactor", "cache_write"])
def test_shared_tuple_value_evaluated_once(how):
    s, args = _moments(5, 37, how)
    text = str(polytile.lower(s, args))
    assert "_next = " in text, text
    # the one update that reads A converts it once (in the let that names d)
    assert len(re.findall(r"float32\(A\[", text)) == 1, text
    f = polytile.build(s, args, target="llvm")
    a = np.random.default_rng(37).uniform(-1, 1, (5, 37)).astype("float16")
    outs = [poison((5,), "float32"), poison((5,), "float32")]
    dev = [polytile.nd.array(x) for x in (a, *outs)]
    f(*dev)
    d = a.astype("float64") - 0.5
    check(dev[1].numpy(), d.sum(axis=1), k=37)
    check(dev[2].numpy(), (d * d).sum(axis=1), k=37)
