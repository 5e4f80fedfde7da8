"""Cross-thread reductions (a reduce loop bound to ``threadIdx.x``, TVM's all-reduce)
computed at another stage's loop with ``compute_at`` (issue 11's fault).

The final combine of such a reduction runs on thread 0. It used to be a restriction of the
stage's domain, so isl put ``if (threadIdx.x == 0)`` around the whole attached code,
barriers included: ``__syncthreads()`` in divergent code (a hang or no ordering on a GPU).
A combine into a ``local`` buffer was written by thread 0 only, the other threads reading
their never-written copies. Now the guard sits inside each statement, barriers stay
uniform, and a ``local`` result is combined by every thread (the broadcast).

The reference interpreter runs the kernels (threads interleaved at barriers, races and
barriers in divergent code reported); nvcc compiles their CUDA C where it exists. The
emulated and GPU runs are in ``tests/targets/test_cuda_allreduce.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
from allreduce_cases import explicit_rfactor, layernorm, softmax
from helpers import check, compile_with_nvcc, poison, rand

import polytile
from polytile import te
from polytile.errors import ScheduleError
from polytile.schedule.interpreter import run
from polytile.schedule.loop_ir import IfThenElse, StmtMutator, StmtVisitor, Sync
from polytile.te.expr import Cmp, Const, Var
from polytile.te.visitor import collect


def _interpret(case):
    s, args, inputs, ref = case
    out = poison(args[-1].shape, args[-1].dtype)
    run(polytile.lower(s, args), *inputs, out)
    return out, ref


class _DivergentSync(StmtVisitor):
    """Counts the syncs under a condition on a thread index."""

    def __init__(self):
        self.found, self.depth = 0, 0

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        thread = any(v.name.startswith("threadIdx") for v in collect(s.cond, Var))
        self.depth += thread
        self.generic_visit(s)
        self.depth -= thread

    def visit_Sync(self, s: Sync) -> None:
        self.found += self.depth > 0


def _divergent_syncs(s, args) -> int:
    v = _DivergentSync()
    v.visit(polytile.lower(s, args).body)
    return v.found


@pytest.mark.parametrize("m, n, threads", [(5, 37, 8), (3, 5, 8), (1, 1, 4), (7, 31, 16),
                                           (2, 64, 32), (3, 17, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_softmax_two_attached_allreduces(m, n, threads, dtype):
    case = softmax(m, n, threads, dtype)
    out, ref = _interpret(case)
    check(out, ref, k=n)
    assert _divergent_syncs(case[0], case[1]) == 0


@pytest.mark.parametrize("m, n, threads", [(3, 11, 4), (2, 13, 8), (5, 2, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layernorm_dependent_attached_allreduces(m, n, threads, dtype):
    out, ref = _interpret(layernorm(m, n, threads, dtype))
    check(out, ref, k=n)


@pytest.mark.parametrize("case", [lambda: softmax(3, 13, 4, scope="local"),
                                  lambda: layernorm(2, 11, 4, "float16", scope="local")])
def test_a_local_result_is_combined_by_every_thread(case):
    """Thread 0 alone combined into its own register: the others read poison."""
    s, args, inputs, ref = case()
    out, ref = _interpret((s, args, inputs, ref))
    check(out, ref, k=args[0].shape[1])


def test_allreduce_attached_to_a_serial_loop_inside_the_kernel():
    out, ref = _interpret(softmax(2, 13, 4, at_row=False))
    check(out, ref, k=13)


def test_explicit_rfactor_form_attached():
    out, ref = _interpret(explicit_rfactor(3, 11, 4))
    check(out, ref, k=11)


def _row_scaled(m, n, threads, how):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    S = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="S")
    O = te.compute((m, n), lambda i, j: A[i, j] * S[i], name="O")
    s = te.create_schedule(O.op)
    i, j = O.op.axis
    jo, ji = s[O].split(j, factor=threads)
    _, ki = s[S].split(k, factor=threads)
    s[S].bind(ki, te.thread_axis("threadIdx.x"))
    if how == "rows_on_y":   # rows of a block on threadIdx.y, each reduced over threadIdx.x
        io, ii = s[O].split(i, factor=2)
        s[O].reorder(io, ii, jo, ji)
        s[O].bind(io, te.thread_axis("blockIdx.x"))
        s[O].bind(ii, te.thread_axis("threadIdx.y"))
        s[O].bind(ji, te.thread_axis("threadIdx.x"))
        _, si = s[S].split(S.op.axis[0], factor=2)
        s[S].bind(si, te.thread_axis("threadIdx.y"))
        s[S].compute_at(s[O], io)
    elif how == "one_block":   # no blockIdx: the rows are a serial loop of one block
        s[O].bind(ji, te.thread_axis("threadIdx.x"))
        s[S].compute_at(s[O], i)
    else:   # inside O's loop bound to threadIdx.x or threadIdx.y
        s[O].reorder(i, ji, jo)
        s[O].bind(i, te.thread_axis("blockIdx.x"))
        s[O].bind(ji, te.thread_axis(how))
        s[S].compute_at(s[O], ji)
    return s, [A, O]


@pytest.mark.parametrize("how", ["rows_on_y", "one_block"])
def test_row_scaled_by_an_attached_allreduce(how):
    s, args = _row_scaled(5, 13, 4, how)
    a = rand((5, 13))
    out, _ = _interpret((s, args, [a], None))
    x = a.astype("float64")
    check(out, x * x.sum(axis=1, keepdims=True), k=13)


@pytest.mark.parametrize("tag", ["threadIdx.x", "threadIdx.y"])
def test_allreduce_inside_a_thread_loop_is_refused(tag):
    """Each thread of the loop would run the block's reduction (it crashed in lowering)."""
    s, args = _row_scaled(5, 13, 4, tag)
    with pytest.raises(ScheduleError, match=r"compute_at: stage 'S' is a cross-thread "
                       r"reduction over 'k.inner' .* inside loop 'j.inner' of stage 'O', "
                       rf"which is bound to '{tag}'"):
        polytile.lower(s, args)


def test_the_interpreter_refuses_barriers_in_divergent_code():
    """The oracle itself: the threads of a block waiting at two different barriers (the
    count of barriers reached agrees, so only the identity of the barrier tells)."""
    s, args = _row_scaled(2, 4, 4, "one_block")
    f = polytile.lower(s, args)
    tx = next(v for v in collect_vars(f.body) if v.name == "threadIdx.x")

    class Diverge(StmtMutator):
        done = False

        def visit_Sync(self, node):
            if self.done:
                return node
            self.done = True
            return IfThenElse(Cmp("bool", "eq", tx, Const("int64", 0)), Sync("shared"),
                              Sync("shared"))

    bad = dataclasses.replace(f, body=Diverge().visit(f.body))
    with pytest.raises(RuntimeError, match="wait at different barriers"):
        run(bad, rand((2, 4)), poison((2, 4), "float32"))
    assert _divergent_syncs(s, args) == 0


def collect_vars(stmt) -> list:
    """The variables of the expressions of ``stmt``."""
    out: list = []

    class V(StmtVisitor):
        def visit_expr(self, e):
            out.extend(collect(e, Var))

    V().visit(stmt)
    return out


@pytest.mark.parametrize("case", [lambda: softmax(3, 37, 32, "float16"),
                                  lambda: layernorm(3, 37, 32)])
def test_cuda_source_compiles_with_nvcc(case):
    s, args, _, _ = case()
    compile_with_nvcc(polytile.build(s, args, target="cuda").get_source())
