"""``cache_write`` keeps the original ``reduce_axis``: TVM users schedule the cache stage
with ``C.op.reduce_axis[k]`` of the tensor they wrote (TVM moves those axes to the cache
stage), so ``s[CC].split(C.op.reduce_axis[0], 4)`` must work and compute the definition."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand, run1

from polytile import te
from polytile.errors import ScheduleError


def _matmul(m, n, kk):
    A = te.placeholder((m, kk), name="A")
    B = te.placeholder((kk, n), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


@pytest.mark.parametrize("m,n,kk,factor", [(13, 11, 17, 4), (1, 7, 5, 3), (9, 1, 31, 8)])
def test_split_of_the_original_reduce_axis_on_the_cache_stage(backend, m, n, kk, factor):
    A, B, C = _matmul(m, n, kk)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    assert CC.op.reduce_axis[0] is C.op.reduce_axis[0]
    ko, ki = s[CC].split(C.op.reduce_axis[0], factor)
    s[CC].reorder(ko, CC.op.axis[0], ki, CC.op.axis[1])
    s[CC].compute_at(s[C], s[C].op.axis[0])
    a, b = rand((m, kk), seed=1), rand((kk, n), seed=2)
    out = run1(s, [A, B, C], [a, b], backend)
    check(out, a.astype("float64") @ b.astype("float64"), k=kk)


def test_the_copy_stage_has_no_reduce_axis_left():
    A, B, C = _matmul(5, 6, 7)
    s = te.create_schedule(C.op)
    s.cache_write(C, "local")
    assert s[C].op.reduce_axis == ()
    with pytest.raises(ScheduleError, match="split"):
        s[C].split(C.op.reduce_axis[0], 2)


def test_gpu_register_cache_split_by_the_original_reduce_axis():
    from helpers import compile_with_nvcc

    import polytile
    from polytile.schedule import interpreter

    m, n, kk = 19, 21, 13
    A, B, C = _matmul(m, n, kk)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    bx, tx = s[C].split(C.op.axis[0], 8)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], tx)
    ko, ki = s[CC].split(C.op.reduce_axis[0], 4)
    s[CC].unroll(ki)
    compile_with_nvcc(polytile.build(s, [A, B, C], target="cuda").get_source())
    a, b = rand((m, kk), seed=3), rand((kk, n), seed=4)
    out = np.full((m, n), np.nan, "float32")
    interpreter.run(polytile.lower(s, [A, B, C]), a, b, out)
    check(out, a.astype("float64") @ b.astype("float64"), k=kk)
