"""Thread-owned dimensions: a ``local`` stage computed at a block loop whose own axis is
bound to a thread index keeps, in each thread's copy, only the slice that thread computes
(``attach.check_storage_scope`` / ``attach.check_thread_owned``).

The row of a block is reshaped to ``R[i, o, t, v] = A[i, o*T*V + t*V + v]`` with ``t``
bound to ``threadIdx.x``: each thread holds ``O x V`` elements (registers), read once from
global memory, and every pass over the row (a cross-thread mean, then the row minus it)
reads them from there. Checked: the buffer's per-thread shape, exact results on the
reference interpreter (races checked) at rows that the threads divide and ragged ones, and
the refusals where a thread would read another's copy or the bound loop is not a whole
axis.
"""

from __future__ import annotations

import pytest
from helpers import check, poison, rand

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run as interpret

TX = "threadIdx.x"


def _centred(M, N, nt, vec, shift=0, bind_whole=True):
    """``out = A - mean(A, axis=1)`` with the row in registers (see the module doc);
    ``shift`` makes the output read thread ``t + shift``'s elements."""
    O = -(-N // (nt * vec))
    A = te.placeholder((M, N), name="A")
    last = N - vec
    R = te.compute((M, O, nt, vec), lambda i, o, t, v: A[
        i, te.min(o * nt * vec + t * vec, last) + v], name="R")
    k = te.reduce_axis((0, N), name="k")
    tv = nt * vec

    def at(i, j, s=0):
        return R[i, j // tv, (j // vec + s) % nt, j % vec]

    mean = te.compute((M,), lambda i: te.sum(at(i, k) * (1.0 / N), axis=k), name="mean")
    out = te.compute((M, N), lambda i, j: at(i, j, shift) - mean[i], name="out")
    s = te.create_schedule(out.op)
    s[R].set_scope("local")
    i, j = out.op.axis
    j0, jv = s[out].split(j, factor=vec)
    jo, jt = s[out].split(j0, factor=nt)
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    s[out].bind(jt, te.thread_axis(TX))
    ri, ro, rt, rv = R.op.axis
    if bind_whole:
        s[R].reorder(ri, rt, ro, rv)
        s[R].bind(rt, te.thread_axis(TX))
    else:
        s[R].bind(s[R].split(ro, factor=2)[1], te.thread_axis(TX))
    s[R].compute_at(s[out], i)
    k0, kv = s[mean].split(k, factor=vec)
    ko, kt = s[mean].split(k0, factor=nt)
    s[mean].reorder(ko, kt, kv)
    s[mean].bind(kt, te.thread_axis(TX))
    s[mean].compute_at(s[out], i)
    return s, [A, out]


@pytest.mark.parametrize("shape", [(5, 96, 8, 4), (3, 100, 8, 4), (2, 1000, 32, 4)])
def test_each_thread_keeps_its_slice_of_the_row(shape):
    M, N, nt, vec = shape
    s, args = _centred(M, N, nt, vec)
    f = polytile.lower(s, args, target="cuda")
    O = -(-N // (nt * vec))
    # the thread's O x vec elements, not the block's O x nt x vec
    assert f"R = alloc(float32[1, {O}, 1, {vec}], scope='local')" in str(f)
    a = rand((M, N), seed=N)
    out = poison((M, N), "float32")
    interpret(f, a, out)
    x = a.astype("float64")
    check(out, x - x.mean(axis=1, keepdims=True), k=N)


def test_reading_another_threads_slice_is_refused():
    s, args = _centred(3, 96, 8, 4, shift=1)
    with pytest.raises(ScheduleError, match=r"bind: axis 't' of the local stage 'R' "
                       r"\(computed at 'out'.'i'\) is bound to 'threadIdx.x', each thread "
                       r"keeping its own elements, but 'out' \(compute\) reads on thread "
                       r"threadIdx.x elements another thread computed"):
        polytile.lower(s, args, target="cuda")


def test_a_split_loop_bound_to_a_thread_index_is_refused():
    s, args = _centred(3, 96, 8, 4, bind_whole=False)
    with pytest.raises(ScheduleError, match=r"set_scope: stage 'R' has storage scope 'local', "
                       r"one copy per thread, but binds its own loops 'o.inner' "
                       r"\(threadIdx.x\).*whole \(unsplit, unfused\) axis"):
        polytile.lower(s, args, target="cuda")


def test_the_cuda_source_keeps_the_slice_in_registers():
    s, args = _centred(64, 4096, 128, 4)
    src = polytile.build(s, args, target="cuda -arch=sm_90").get_source()
    assert "float R[32];" in src   # 8 x 4 elements a thread (the block: 4096)


def _rows_of_threads(C, R, r_tag: str = TX):
    """``C[i, j]`` with ``i`` on ``blockIdx.x`` and ``j`` on ``threadIdx.x``; ``R`` local,
    computed at ``i``, its axis 1 bound to ``r_tag``."""
    s = te.create_schedule(C.op)
    s[C].bind(C.op.axis[0], te.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], te.thread_axis(TX))
    s[R].set_scope("local")
    s[R].bind(R.op.axis[1], te.thread_axis(r_tag))
    s[R].compute_at(s[C], C.op.axis[0])
    return s


def test_a_thread_owned_reduction_is_one_register_a_thread():
    """A ``local`` reduction ``R[i, t] = sum_k A[i, t*5 + k]`` with ``t`` bound to
    ``threadIdx.x``, computed at the block loop: each thread accumulates its own element
    (``float32[1, 1]``), and ``C = 2 R`` reads it on the same thread."""
    M, T, K = 3, 8, 5
    A = te.placeholder((M, T * K), name="A")
    k = te.reduce_axis((0, K), name="k")
    R = te.compute((M, T), lambda i, t: te.sum(A[i, t * K + k], axis=k), name="R")
    C = te.compute((M, T), lambda i, j: R[i, j] * 2, name="C")
    s = _rows_of_threads(C, R)
    f = polytile.lower(s, [A, C], target="cuda")
    assert "R = alloc(float32[1, 1], scope='local')" in str(f)
    a = rand((M, T * K), seed=3)
    c = poison((M, T), "float32")
    interpret(f, a, c)
    check(c, 2 * a.astype("float64").reshape(M, T, K).sum(-1), k=K)


def test_a_local_axis_bound_to_a_block_index_is_refused():
    """A whole axis bound to ``blockIdx.y``: a block index is no thread's own."""
    A = te.placeholder((4, 8), name="A")
    R = te.compute((4, 8), lambda i, j: A[i, j] + 1, name="R")
    C = te.compute((4, 8), lambda i, j: R[i, j] * 2, name="C")
    s = _rows_of_threads(C, R, "blockIdx.y")
    with pytest.raises(ScheduleError, match=r"set_scope: stage 'R' has storage scope 'local', "
                       r"one copy per thread, but binds its own loops 'j' \(blockIdx.y\).*"
                       r"no loop of its own is bound to a block index"):
        polytile.lower(s, [A, C], target="cuda")


def _strided_reader(M: int, T: int, odd_threads_idle: bool):
    """``R[i, t] = 3 A[i, t]`` (``local``, ``t`` bound to ``threadIdx.x``) read at every
    other element, so that its region is compacted with stride 2 (thread ``t`` computes
    ``R[i, lo + 2 t]``). ``odd_threads_idle``: thread ``j`` reads ``R[i, j]`` for even
    ``j`` only (a ``where`` over a reduction whose padded reads span the stride-2
    lattice), which is another thread's element for ``j >= 2``; else thread ``j`` reads
    ``R[i, 2 j]``, its own."""
    A = te.placeholder((M, 2 * T), name="A")
    R = te.compute((M, 2 * T), lambda i, t: A[i, t] * 3, name="R")
    if odd_threads_idle:
        k = te.reduce_axis((0, T), name="k")
        C = te.compute((M, T), lambda i, j: te.sum(R[i, 2 * (j // 2) + 2 * k], axis=k,
                                                   where=te.all(k == 0, j % 2 == 0)),
                       name="C")
    else:
        C = te.compute((M, T), lambda i, j: R[i, 2 * j], name="C")
    s = _rows_of_threads(C, R)
    return s, [A, C]


def test_a_strided_region_is_owned_per_lattice_point():
    # regression: the reader was checked against x - lo == t, but with a region compacted
    # by stride s thread t holds x = lo + s t: the own reads of R[i, 2 j] were refused
    M, T = 3, 7
    s, args = _strided_reader(M, T, odd_threads_idle=False)
    f = polytile.lower(s, args, target="cuda")
    assert "R = alloc(float32[1, 1], scope='local')" in str(f)
    a = rand((M, 2 * T), seed=5)
    c = poison((M, T), "float32")
    interpret(f, a, c)
    check(c, 3 * a.astype("float64")[:, ::2])


def test_reading_another_lattice_points_element_is_refused():
    # regression: thread j read R[i, j] for even j (x - lo == j passed the check) while
    # thread j held R[i, 2 j]: accepted, it printed wrong values and NaNs
    s, args = _strided_reader(3, 8, odd_threads_idle=True)
    with pytest.raises(ScheduleError, match=r"bind: axis 't' of the local stage 'R' .* "
                       r"'C' \(update\) reads on thread threadIdx.x elements another "
                       r"thread computed"):
        polytile.lower(s, args, target="cuda")
