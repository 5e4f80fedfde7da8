"""Schedule primitives: the classic walk-through.

A computation is declared once (*what*); a schedule says *how* to run it. Every step below
prints the loop nest that ``polytile.lower`` produces and checks the built function
against numpy: split, tile, fuse, reorder, vectorize, parallel, unroll, compute_at,
compute_inline, compute_root, cache_read, cache_write, rfactor, and bind for a GPU (its
loop nest is printed everywhere; it is built where a CUDA compiler exists and run where
a GPU does). Run: ``python tutorials/01_compute_and_schedule.py [--n 64]``.
"""

from __future__ import annotations

import argparse

import numpy as np

import polytile
from polytile import te


def check(s, args, inputs, expected, title: str) -> None:
    """Print the loop nest of ``s``, build it, run it and compare with ``expected``."""
    print(f"=== {title}")
    print(polytile.lower(s, args))
    f = polytile.build(s, args, target="llvm")
    out = np.full(expected.shape, np.nan, dtype=expected.dtype)  # poison the output
    f(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    print("result matches numpy\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="problem size (default 64)")
    n = ap.parse_args(argv).n
    m = n + 3  # deliberately not a multiple of the split factors below
    rng = np.random.default_rng(0)

    # --- an elementwise product and a row sum -------------------------------------------
    A = te.placeholder((m, n), name="A")
    B = te.placeholder((m, n), name="B")
    C = te.compute((m, n), lambda i, j: A[i, j] * B[i, j], name="C")
    a = rng.uniform(-1, 1, (m, n)).astype("float32")
    b = rng.uniform(-1, 1, (m, n)).astype("float32")
    ref = a * b

    s = te.create_schedule(C.op)
    check(s, [A, B, C], [a, b], ref, "default schedule: one loop per axis")

    # split: i = i.outer * 8 + i.inner; the last tile is partial (m is not a multiple of 8)
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    check(s, [A, B, C], [a, b], ref, "split(i, factor=8)")

    # split by the number of outer iterations instead
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], nparts=4)
    check(s, [A, B, C], [a, b], ref, "split(i, nparts=4)")

    # tile: split both axes and interchange the middle two
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=8, y_factor=16)
    check(s, [A, B, C], [a, b], ref, "tile(i, j, 8, 16)")

    # fuse: two adjacent loops become one
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=8, y_factor=16)
    s[C].fuse(xi, yi)
    check(s, [A, B, C], [a, b], ref, "tile, then fuse(i.inner, j.inner)")

    # reorder
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    yo, yi = s[C].split(C.op.axis[1], factor=16)
    s[C].reorder(xi, yo, xo, yi)
    check(s, [A, B, C], [a, b], ref, "reorder(i.inner, j.outer, i.outer, j.inner)")

    # vectorize the innermost loop, run the outermost on several threads
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], x_factor=8, y_factor=16)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    check(s, [A, B, C], [a, b], ref, "vectorize(j.inner) + parallel(i.outer)")

    # unroll: one copy of the body per iteration of the inner loop (its partial last tile
    # stays a loop)
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].unroll(ji)
    check(s, [A, B, C], [a, b], ref, "split(j, 4) + unroll(j.inner)")

    # --- a producer and its consumer -----------------------------------------------------
    D = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="D")
    k = te.reduce_axis((0, n), name="k")
    E = te.compute((m,), lambda i: te.sum(D[i, k] * 2.0, axis=k), name="E")
    ref_e = ((a.astype("float64") + 1.0) * 2.0).sum(axis=1).astype("float32")

    s = te.create_schedule(E.op)
    check(s, [A, E], [a], ref_e, "default: D is computed in full, then E")

    # compute_at: compute the row of D that one iteration of E needs, inside that iteration
    s = te.create_schedule(E.op)
    s[D].compute_at(s[E], E.op.axis[0])
    check(s, [A, E], [a], ref_e, "compute_at(D, E, i): D becomes a per-row buffer")

    # compute_inline: substitute D's expression into E; D disappears
    s = te.create_schedule(E.op)
    s[D].compute_inline()
    check(s, [A, E], [a], ref_e, "compute_inline(D)")

    # compute_root: back to the default
    s = te.create_schedule(E.op)
    s[D].compute_at(s[E], E.op.axis[0])
    s[D].compute_root()
    check(s, [A, E], [a], ref_e, "compute_at then compute_root(D)")

    # cache_write: accumulate a tile of 4 rows of E in a buffer of its own (E.local), then
    # copy it out; cache_read: copy the row of A that D needs into A.local first
    s = te.create_schedule(E.op)
    AA = s.cache_read(A, "local", [D])
    EL = s.cache_write(E, "local")
    io, ii = s[E].split(E.op.axis[0], factor=4)
    s[EL].compute_at(s[E], io)
    s[D].compute_at(s[EL], s[EL].op.axis[0])
    s[AA].compute_at(s[D], s[D].op.axis[0])
    check(s, [A, E], [a], ref_e, "cache_write(E) at E's tiles, cache_read(A) per row of D")

    # rfactor: split the reduction and sum the parts in parallel, one partial sum per
    # value of k.inner, then add the partial sums
    s = te.create_schedule(E.op)
    ko, ki = s[E].split(k, factor=8)
    EF = s.rfactor(E, ki)
    s[EF].parallel(s[EF].op.axis[0])
    check(s, [A, E], [a], ref_e, "rfactor(E, k.inner) + parallel partial sums")

    # --- bind: the same row sum on a GPU -------------------------------------------------
    # each block takes 32 rows, each thread one row; lowering prints the kernel without a
    # GPU, building needs NVRTC or nvcc, and running a CUDA device
    s = te.create_schedule(E.op)
    s[D].compute_inline()
    bx, tx = s[E].split(E.op.axis[0], factor=32)
    s[E].bind(bx, te.thread_axis("blockIdx.x"))
    s[E].bind(tx, te.thread_axis("threadIdx.x"))
    print("=== bind(i.outer, blockIdx.x) + bind(i.inner, threadIdx.x)")
    print(polytile.lower(s, [A, E]))
    gpu(s, [A, E], [a], ref_e)

    # --- illegal schedules are refused with the reason ------------------------------------
    s = te.create_schedule(E.op)
    s[E].parallel(k)
    try:
        polytile.lower(s, [A, E])
    except polytile.ScheduleError as err:
        print("=== parallel(k) on a reduction axis is refused:")
        print(err)


def gpu(s, args, inputs, expected) -> None:
    """Build ``s`` for CUDA where a compiler exists and run it where a GPU exists."""
    from polytile.targets.cuda import compile as cc

    if cc.available_compiler() is None:
        print("(no NVRTC or nvcc: the CUDA build is skipped)\n")
        return
    f = polytile.build(s, args, target="cuda")
    print(f"built CUDA C: {len(f.get_source().splitlines())} lines")
    try:
        from polytile.targets.cuda.runtime import device_count

        have = device_count() > 0
    except Exception:  # noqa: BLE001 - no cuda-python, no driver
        have = False
    if not have:
        print("(no CUDA device: not run)\n")
        return
    dev = [polytile.nd.array(x, device="cuda") for x in inputs]
    out = polytile.nd.array(np.full(expected.shape, np.nan, expected.dtype), device="cuda")
    f(*dev, out)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    print("result matches numpy (on the GPU)\n")


if __name__ == "__main__":
    main()
