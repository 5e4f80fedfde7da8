"""Schedules shared by the GPU tests of attached stages (``tests/schedule/test_gpu_attach.py``
builds and interprets them, ``tests/targets/test_cuda_attach.py`` runs their CUDA C)."""

from __future__ import annotations

from polytile import te


def f6_program(n: int = 31, factor: int = 30, threads: int = 64, unroll: bool = True):
    """Case F6: ``C[i] = P[n-1-i] + P[i]`` with P computed per output inside a kernel whose
    padded thread box (``threads * factor``) reaches far past ``n``."""
    A = te.placeholder((n,), name="A")
    P = te.compute((n,), lambda i: A[i] * 2.0, name="P")
    C = te.compute((n,), lambda i: P[n - 1 - i] + P[i], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    bo, to = s[C].split(io, factor=threads)
    s[C].bind(bo, te.thread_axis("blockIdx.x"))
    s[C].bind(to, te.thread_axis("threadIdx.x"))
    s[P].compute_at(s[C], ii)
    if unroll:
        s[P].unroll(P.op.axis[0])
    return s, [A, C]


def f2_program(where=lambda k, q: k % 2 == 0, reducer=te.min, dtype="int16"):
    """Case F2: a reduction over two axes whose ``where`` never holds (k is 1), bound to
    blockIdx.x: the kernel only stores the reducer's identity."""
    A = te.placeholder((2, 2), dtype, name="A")
    k = te.reduce_axis((1, 2), name="k")
    q = te.reduce_axis((0, 2), name="q")
    R = te.compute((1,), lambda z: reducer(A[k, q], axis=[k, q], where=where(k, q)), name="R")
    s = te.create_schedule(R.op)
    s[R].bind(R.op.axis[0], te.thread_axis("blockIdx.x"))
    return s, [A, R]


def vthread_gemm(n=32, m=None, kk=None, threads=4, per=2, vt=2):
    """TVM's classic GPU matmul: shared tiles of A and B computed at the k-outer loop,
    fetched cooperatively (each fetch loop split and bound to threadIdx, the innermost
    vectorized), local copies at k-inner, a local accumulator, and two virtual threads
    per axis interleaving the tiles of each thread."""
    m, kk = m or n, kk or n
    A = te.placeholder((n, kk), name="A")
    B = te.placeholder((kk, m), name="B")
    k = te.reduce_axis((0, kk), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    AL, BL = s.cache_read(AA, "local", [C]), s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")
    block = per * threads * vt
    ty_, tx_ = te.thread_axis((0, threads), "threadIdx.y"), te.thread_axis((0, threads),
                                                                            "threadIdx.x")
    by, yi = s[C].split(C.op.axis[0], factor=block)
    bx, xi = s[C].split(C.op.axis[1], factor=block)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].reorder(by, bx, yi, xi)
    tyz, yi = s[C].split(yi, nparts=vt)
    ty, yi = s[C].split(yi, nparts=threads)
    txz, xi = s[C].split(xi, nparts=vt)
    tx, xi = s[C].split(xi, nparts=threads)
    s[C].bind(tyz, te.thread_axis((0, vt), "vthread", name="vy"))
    s[C].bind(txz, te.thread_axis((0, vt), "vthread", name="vx"))
    s[C].bind(ty, ty_)
    s[C].bind(tx, tx_)
    s[C].reorder(tyz, txz, ty, tx, yi, xi)
    s[CC].compute_at(s[C], tx)
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=8)
    kt, ki = s[CC].split(ki, factor=1)
    s[CC].reorder(ko, kt, ki, *CC.op.axis)
    s[CC].unroll(kt)
    for T in (AA, BB):
        s[T].compute_at(s[CC], ko)
    for T in (AL, BL):
        s[T].compute_at(s[CC], kt)
    for T in (AA, BB):
        t_y, rest = s[T].split(s[T].op.axis[0], nparts=threads)
        _, rest = s[T].split(s[T].op.axis[1], factor=threads * 4)
        t_x, v = s[T].split(rest, nparts=threads)
        s[T].bind(t_y, ty_)
        s[T].bind(t_x, tx_)
        s[T].vectorize(v)
    return s, [A, B, C]
