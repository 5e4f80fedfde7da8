"""TE-surface gaps of issue 9 closed by tesurf4: an argument tensor computed at a loop of
its consumer, and the rest (see docs/tvm_compatibility.md); numeric results against
numpy float64 at odd sizes, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check, rand

import polytile
from polytile import ScheduleError, te
from polytile.schedule import interpreter


def _run(s, args, inputs, shapes):
    outs = [np.full(sh, np.nan, "float32") for sh in shapes]
    polytile.build(s, args)(*inputs, *outs)
    return outs


# ------------------------------------------------- an argument computed at another stage
def test_tvm_schedule_primitives_tutorial_compute_at_argument():
    # TVM's schedule_primitives tutorial: lower(s, [A, B, C]) with B computed at C
    m, n = 17, 13
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[1])
    a = rand((m, n), seed=1)
    b, c = _run(s, [A, B, C], [a], [(m, n), (m, n)])
    check(b, a.astype("float64") + 1)
    check(c, (a.astype("float64") + 1) * 2)


def test_tvm_schedule_primitives_tutorial_inlined_argument_is_refused_with_a_hint():
    # the tutorial's next step inlines B and still lowers [A, B, C]; TVM leaves B unwritten
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((9,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    with pytest.raises(ScheduleError, match=r"(?s)lower: tensor 'B' in args is inlined "
                       r"\(compute_inline\).*hint: leave 'B' out of args"):
        polytile.lower(s, [A, B, C])
    a = rand((9,), seed=2)
    (c,) = _run(s, [A, C], [a], [(9,)])
    check(c, (a.astype("float64") + 1) * 2)


@pytest.mark.parametrize("parallel", [False, True])
def test_argument_reduction_at_a_tile_with_a_halo(parallel):
    # B (a row sum) is an argument, computed per tile of D's rows; D reads a 3-row window
    m, n = 29, 11
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    D = te.compute((m - 2,), lambda i: B[i] + B[i + 1] * 2.0 + B[i + 2], name="D")
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[B].compute_at(s[D], io)
    a = rand((m, n), seed=2)
    rb = a.astype("float64").sum(axis=1)
    if parallel:
        s[D].parallel(io)
        with pytest.raises(ScheduleError, match=r"compute_at: stage 'B' is in args and "
                           r"computed at 'D'.'i.outer', and the regions of iterations of the "
                           r"parallel loop 'i.outer' overlap"):
            polytile.lower(s, [A, B, D])
        return
    b, d = _run(s, [A, B, D], [a], [(m,), (m - 2,)])
    check(b, rb, k=n)
    check(d, rb[:-2] + 2 * rb[1:-1] + rb[2:], k=3 * n)


def test_argument_at_a_parallel_loop_without_overlap():
    m, n = 31, 9
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] - A[i, j], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    s[C].parallel(io)
    s[B].compute_at(s[C], ii)
    a = rand((m, n), seed=3)
    b, c = _run(s, [A, B, C], [a], [(m, n), (m, n)])
    check(b, np.exp(a.astype("float64")))
    check(c, np.exp(a.astype("float64")) - a)


def test_argument_read_in_part_is_refused():
    m, n = 7, 9
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, 3), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'B' is in args and computed "
                       r"at 'C'.'i', which reads only part of it: .* would never be written"):
        polytile.lower(s, [A, B, C])
    # without B in the arguments it is an intermediate as before
    polytile.lower(s, [A, C])


def _argument_in_kernel(at: str, halo: bool, m=7, n=29):
    # B (an argument) computed at C's block loop (thread 0 of each block computes the
    # block's row, a barrier, then every thread reads it) or at its thread loop (each
    # thread its own element)
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    if halo:
        C = te.compute((m, n), lambda i, j: B[i, j] * 2.0 + B[(i + 1) % m, j], name="C")
    else:
        C = te.compute((m, n), lambda i, j: B[i, j] * 2.0 + B[i, (j + 1) % n], name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], C.op.axis[0] if at == "block" else C.op.axis[1])
    return s, [A, B, C]


def test_argument_at_a_block_loop_in_a_gpu_kernel(tmp_path, monkeypatch):
    import os
    import sys

    from polytile.targets import Target
    from polytile.targets.cuda.runtime import CUDAModule
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "targets"))
    import cuda_emulator

    m, n = 7, 29
    s, args = _argument_in_kernel("block", halo=False, m=m, n=n)
    func = polytile.lower(s, args, target="cuda", stop_after=None)
    a = rand((m, n), seed=21)
    b64 = a.astype("float64") + 1
    want = b64 * 2 + np.roll(b64, -1, axis=1)
    b, c = np.full((m, n), np.nan, "float32"), np.full((m, n), np.nan, "float32")
    interpreter.run(func, a, b, c)     # checks the threads for races too
    check(b, b64)
    check(c, want)
    with cuda_emulator.installed(tmp_path, monkeypatch):
        f = CUDAModule(func, Target.parse("cuda"))
        dev = [polytile.nd.array(x, device="cuda") for x in
               (a, np.full((m, n), np.nan, "float32"), np.full((m, n), np.nan, "float32"))]
        f(*dev)
        check(dev[1].numpy(), b64)
        check(dev[2].numpy(), want)


def test_argument_at_a_thread_loop_in_a_gpu_kernel():
    m, n = 5, 13
    A = te.placeholder((m, n), name="A")
    B = te.compute((m, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], C.op.axis[1])
    func = polytile.lower(s, [A, B, C], target="cuda", stop_after=None)
    a = rand((m, n), seed=22)
    b, c = np.full((m, n), np.nan, "float32"), np.full((m, n), np.nan, "float32")
    interpreter.run(func, a, b, c)
    check(b, a.astype("float64") + 1)
    check(c, (a.astype("float64") + 1) * 2)


@pytest.mark.parametrize("at", ["block", "thread"])
def test_argument_in_a_gpu_kernel_with_a_halo_is_refused(at):
    s, args = _argument_in_kernel(at, halo=True) if at == "block" else \
        _argument_in_kernel(at, halo=False)
    loop = "i" if at == "block" else "j"
    with pytest.raises(ScheduleError, match=rf"compute_at: stage 'B' is in args and computed "
                       rf"at 'C'.'{loop}' in a GPU kernel, and the regions of two iterations "
                       r"of the loops around it overlap \(a halo\)"):
        polytile.lower(s, args, target="cuda")


# ------------------------------------------- cross-thread reduction over two reduce loops
def _sum2(n=5, k0=13, k1=7):
    A = te.placeholder((n, k0, k1), name="A")
    r0, r1 = te.reduce_axis((0, k0), "k0"), te.reduce_axis((0, k1), "k1")
    B = te.compute((n,), lambda i: te.sum(A[i, r0, r1], axis=(r0, r1)), name="B")
    return A, B


@pytest.mark.parametrize("fused", [False, True])
def test_crossthread_reduction_over_two_loops(fused):
    from helpers import compile_with_nvcc

    from polytile.schedule import interpreter
    A, B = _sum2()
    s = te.create_schedule(B.op)
    k0o, k0i = s[B].split(B.op.reduce_axis[0], nparts=8)
    k1o, k1i = s[B].split(B.op.reduce_axis[1], nparts=3)
    if fused:   # the user's own fuse of the two outer loops
        s[B].reorder(B.op.axis[0], k0o, k1o, k0i, k1i)
        s[B].bind(s[B].fuse(k0o, k1o), te.thread_axis("threadIdx.x"))
    else:       # TVM's test_crossthread_reduction2: two loops on two indices
        s[B].bind(k0o, te.thread_axis("threadIdx.x"))
        s[B].bind(k1o, te.thread_axis("threadIdx.y"))
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    func = polytile.lower(s, [A, B], target="cuda")
    assert "block=[21, 1, 1]" in str(func)     # 7 parts of 13 (factor 2) times 3
    a = rand((5, 13, 7), seed=9)
    b = np.full(5, np.nan, "float32")
    interpreter.run(func, a, b)
    check(b, a.astype("float64").sum((1, 2)), k=91)
    compile_with_nvcc(polytile.build(s, [A, B], target="cuda").get_source())


def test_crossthread_reduction_over_two_loops_with_rows_on_threads():
    from polytile.schedule import interpreter
    A, B = _sum2()
    s = te.create_schedule(B.op)
    k0o, _ = s[B].split(B.op.reduce_axis[0], nparts=4)
    k1o, _ = s[B].split(B.op.reduce_axis[1], nparts=2)
    io, ii = s[B].split(B.op.axis[0], factor=2)
    s[B].bind(k0o, te.thread_axis("threadIdx.x"))
    s[B].bind(k1o, te.thread_axis("threadIdx.y"))
    s[B].bind(ii, te.thread_axis("threadIdx.z"))
    s[B].bind(io, te.thread_axis("blockIdx.x"))
    func = polytile.lower(s, [A, B], target="cuda")
    a = rand((5, 13, 7), seed=10)
    b = np.full(5, np.nan, "float32")
    interpreter.run(func, a, b)
    check(b, a.astype("float64").sum((1, 2)), k=91)


# ------------------------------------------------------------ te.extern with several outputs
TWO_OUTS = r"""
int two_outs(const float* a, float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) { x[i] = a[i] + 1.0f; y[i] = a[i] * 3.0f; }
  return 0;
}
"""


@pytest.mark.parametrize("inline", [False, True])
def test_extern_with_two_outputs(inline):
    from polytile import tir
    n = 29
    A = te.placeholder((n,), name="A")
    X, Y = te.extern([(n,), (n,)], [A], lambda ins, outs: tir.call_extern(
        "int32", "two_outs", ins[0].access_ptr("r"), outs[0].access_ptr("w"),
        outs[1].access_ptr("w"), n), name="E")
    assert (X.name, Y.name) == ("E.v0", "E.v1")
    D = te.compute((n,), lambda i: X[i] * Y[i] - 2.0, name="D")
    s = te.create_schedule([D.op, Y.op])
    packed = s[X].op.input_tensors[0]
    s[packed].pragma(packed.op.axis[0], "import_c", TWO_OUTS)
    if inline:
        s[X].compute_inline()
    a = rand((n,), seed=12)
    y, d = _run(s, [A, Y, D], [a], [(n,), (n,)])
    x64 = a.astype("float64")
    check(y, x64 * 3)
    check(d, (x64 + 1) * (x64 * 3) - 2)


def test_extern_output_shape_with_a_symbolic_inner_extent_is_refused():
    # (outputs of different dtypes: tests/schedule/test_extern_dtypes.py)
    from polytile import tir
    from polytile.errors import DefinitionValueError
    A = te.placeholder((8,), name="A")
    n = te.var("n")
    with pytest.raises(DefinitionValueError, match=r"extern: 'E': output of the shape \(3, n\) "
                       r"has the symbolic extent n after its first axis"):
        te.extern([(3, n), (4,)], [A], lambda ins, outs: tir.call_extern(
            "int32", "f", ins[0].access_ptr("r")), name="E")


THREE_SHAPES = r"""
int three_shapes(const float* a, float* x, float* y, float* z, int n) {
  for (int i = 0; i < n; ++i) x[i] = a[i] + 1.0f;
  for (int r = 0; r < 2; ++r) for (int c = 0; c < 3; ++c) y[r * 3 + c] = a[c] * (r + 2);
  z[0] = a[n - 1] - 5.0f;
  return 0;
}
"""


@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("inline", [False, True])
def test_extern_outputs_of_different_shapes(symbolic, inline):
    # TVM's te.extern with a list of output shapes that differ: one flat stacked array
    from polytile import tir
    n0 = 11
    n = te.var("n") if symbolic else n0
    A = te.placeholder((n,), name="A")
    X, Y, Z = te.extern([(n,), (2, 3), ()], [A], lambda ins, outs: tir.call_extern(
        "int32", "three_shapes", ins[0].access_ptr("r"), outs[0].access_ptr("w"),
        outs[1].access_ptr("w"), outs[2].access_ptr("w"), n), name="E")
    assert [tuple(t.shape) for t in (Y, Z)] == [(2, 3), ()]
    D = te.compute((2, 3), lambda r, c: Y[r, c] * 2.0 + Z[()], name="D")
    s = te.create_schedule([X.op, D.op])
    packed = s[X].op.input_tensors[0]
    s[packed].pragma(packed.op.axis[0], "import_c", THREE_SHAPES)
    if inline:
        s[Y].compute_inline()
        s[Z].compute_inline()
    a = rand((n0,), seed=4)
    x, d = _run(s, [A, X, D], [a], [(n0,), (2, 3)])
    a64 = a.astype("float64")
    y = a64[None, :3] * np.array([[2.0], [3.0]])
    check(x, a64 + 1)
    check(d, y * 2 + (a64[-1] - 5))


HALF = r"""
int half_out(const float* a, float* x, int n) {
  for (int i = 0; i < n / 2; ++i) x[i] = a[i] * 2.0f;
  return 0;
}
"""


def test_extern_output_is_not_filled_before_the_call():
    # the outputs of a te.extern are its code's to write (TVM): polytile stores nothing
    # there first, so the elements the code leaves alone keep what they held
    from polytile import tir
    n = 13
    A = te.placeholder((n,), name="A")
    X = te.extern((n,), [A], lambda ins, outs: tir.call_extern(
        "int32", "half_out", ins[0].access_ptr("r"), outs[0].access_ptr("w"), n), name="X")
    s = te.create_schedule(X.op)
    s[X].pragma(X.op.axis[0], "import_c", HALF)
    a = rand((n,), seed=3)
    x = np.full(n, 7.5, "float32")
    polytile.build(s, [A, X])(a, x)
    check(x[:n // 2], a[:n // 2].astype("float64") * 2)
    assert (x[n // 2:] == 7.5).all()
