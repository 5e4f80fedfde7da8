"""Row kernels with cross-thread reductions (a reduce loop bound to ``threadIdx.x``, TVM's
all-reduce) computed at the output's row loop (``compute_at``): softmax, layer
normalisation and a row sum, each returning ``(schedule, args, inputs, reference)`` with
float64 references. Shared by ``tests/schedule/test_allreduce_attach.py`` (interpreter,
nvcc) and ``tests/targets/test_cuda_allreduce.py`` (emulated driver, GPU)."""

from __future__ import annotations

import numpy as np
from helpers import rand

from polytile import te


def _bind_row(s, out, threads: int, *, at_row: bool = True):
    """``out[M, N]``: rows on blockIdx.x, the columns split over ``threads`` threads."""
    i, j = out.op.axis
    jo, ji = s[out].split(j, factor=threads)
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    s[out].bind(ji, te.thread_axis("threadIdx.x"))
    return i if at_row else jo


def _allreduce_at(s, R, out, at, threads: int, scope: str | None = None) -> None:
    _, ki = s[R].split(R.op.reduce_axis[0], factor=threads)
    s[R].bind(ki, te.thread_axis("threadIdx.x"))
    s[R].compute_at(s[out], at)
    if scope is not None:
        s[R].set_scope(scope)


def softmax(m: int, n: int, threads: int, dtype: str = "float32", scope: str | None = None,
            at_row: bool = True, seed: int = 0):
    """``O = exp(A - max_j A) / sum_j exp(A - max_j A)`` row-wise: two cross-thread
    reductions in sequence (the sum reads the maximum), both attached to ``O``'s row loop
    (or, with ``at_row=False``, to its serial column loop: recomputed per strip)."""
    A = te.placeholder((m, n), name="A", dtype=dtype)
    k1 = te.reduce_axis((0, n), name="k1")
    k2 = te.reduce_axis((0, n), name="k2")
    acc = "float32"   # the statistics in float32 whatever the data
    MX = te.compute((m,), lambda i: te.max(A[i, k1].astype(acc), axis=k1), name="MX")
    S = te.compute((m,), lambda i: te.sum(te.exp(A[i, k2].astype(acc) - MX[i]), axis=k2),
                   name="S")
    O = te.compute((m, n), lambda i, j: (te.exp(A[i, j].astype(acc) - MX[i]) / S[i])
                   .astype(dtype), name="O")
    s = te.create_schedule(O.op)
    at = _bind_row(s, O, threads, at_row=at_row)
    for R in (MX, S):
        _allreduce_at(s, R, O, at, threads, scope)
    a = rand((m, n), dtype, seed=seed, low=-4, high=4)
    x = a.astype("float64")
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return s, [A, O], [a], e / e.sum(axis=1, keepdims=True)


def layernorm(m: int, n: int, threads: int, dtype: str = "float32", scope: str | None = None,
              seed: int = 0):
    """Layer normalisation with gamma and beta: the mean, then the variance around it, two
    dependent cross-thread reductions attached to the output's row loop."""
    A = te.placeholder((m, n), name="A", dtype=dtype)
    G = te.placeholder((n,), name="G", dtype=dtype)
    B = te.placeholder((n,), name="B", dtype=dtype)
    k1 = te.reduce_axis((0, n), name="k1")
    k2 = te.reduce_axis((0, n), name="k2")
    acc, inv = "float32", te.const(1.0 / n, "float32")
    MU = te.compute((m,), lambda i: te.sum(A[i, k1].astype(acc) * inv, axis=k1), name="MU")
    VAR = te.compute((m,), lambda i: te.sum((A[i, k2].astype(acc) - MU[i])
                                            * (A[i, k2].astype(acc) - MU[i]) * inv, axis=k2),
                     name="VAR")
    O = te.compute((m, n), lambda i, j: ((A[i, j].astype(acc) - MU[i])
                                         * te.rsqrt(VAR[i] + te.const(1e-5, acc))
                                         * G[j].astype(acc) + B[j].astype(acc)).astype(dtype),
                   name="O")
    s = te.create_schedule(O.op)
    at = _bind_row(s, O, threads)
    for R in (MU, VAR):
        _allreduce_at(s, R, O, at, threads, scope)
    a = rand((m, n), dtype, seed=seed, low=-3, high=3)
    g = rand((n,), dtype, seed=seed + 1)
    b = rand((n,), dtype, seed=seed + 2)
    x = a.astype("float64")
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5) * g.astype("float64") + b.astype("float64")
    return s, [A, G, B, O], [a, g, b], ref


def explicit_rfactor(m: int, n: int, threads: int, seed: int = 0):
    """TVM's explicit all-reduce, attached: ``BF = s.rfactor(R, ki)``, ``R``'s reduce axis
    on threadIdx.x, ``BF`` computed there, ``R`` computed at ``O``'s row; ``O = A - R``."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    R = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="R")
    O = te.compute((m, n), lambda i, j: A[i, j] - R[i], name="O")
    s = te.create_schedule(O.op)
    at = _bind_row(s, O, threads)
    _, ki = s[R].split(k, factor=threads)
    BF = s.rfactor(R, ki)
    s[R].bind(s[R].op.reduce_axis[0], te.thread_axis("threadIdx.x"))
    s[BF].compute_at(s[R], s[R].op.reduce_axis[0])
    s[R].compute_at(s[O], at)
    a = rand((m, n), seed=seed)
    x = a.astype("float64")
    return s, [A, O], [a], x - x.sum(axis=1, keepdims=True)
