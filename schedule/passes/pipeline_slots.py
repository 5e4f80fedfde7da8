"""What the software pipeline (:mod:`.software_pipeline`) and its fragment prefetch
(:mod:`.fragment_prefetch`) share: accesses of the slotted shared buffers, the int64
index arithmetic of the pipelined loop, the loop-invariance test and the refusal.

A pipelined loop gives each shared buffer ``B`` it copies into a leading dimension of
``stages`` slots (a new buffer); :class:`Slots` rewrites every access of ``B`` in a
statement into an access of the new buffer at one slot.
"""

from __future__ import annotations

from polytile.errors import fail
from polytile.te.expr import Binary, Const, Expr
from polytile.te.visitor import ExprMutator, collect

from ..kinds import PipelinePragma
from ..loop_ir import IfThenElse, Load, Seq, StmtMutator, Store, TensorCall


def refuse(p: PipelinePragma, what: str, expected: str, **ctx):
    """Raise the ``ScheduleError`` of primitive ``pipeline`` for loop ``p.axis`` of stage
    ``p.stage`` (of ``double_buffer``, naming its stages, where that asked for the
    pipeline): ``what`` is wrong, ``expected`` was; ``hint`` and labelled context
    optional."""
    fail(*pipeline_subject(p, what), expected, hint=ctx.pop("hint", None), **ctx)


def pipeline_subject(p: PipelinePragma, what: str) -> tuple:
    """``(primitive, message)`` of a refusal of pipeline ``p`` saying ``what``:
    ``double_buffer`` and its stages where ``double_buffer()`` asked for the pipeline
    (the user never called ``pipeline``), else ``pipeline``."""
    where = f"loop {p.axis!r} of stage {p.stage!r}"
    if not p.via:
        return "pipeline", f"{where}: {what}"
    names = ", ".join(repr(v) for v in p.via)
    return ("double_buffer", f"stage{'s' if len(p.via) > 1 else ''} {names}, computed at "
            f"{where} (double buffering pipelines that loop): {what}")


class _SlotLoads(ExprMutator):
    def __init__(self, new: dict, slot: Expr):
        self.new, self.slot = new, slot

    def visit_Load(self, x: Load):
        x = self.generic_visit(x)
        if id(x.buffer) in self.new:
            return Load(x.dtype, self.new[id(x.buffer)], (self.slot,) + tuple(x.indices))
        return x


class Slots(StmtMutator):
    """Accesses of the buffers of ``new`` (old buffer id -> new buffer) at slot ``slot``."""

    def __init__(self, new: dict, slot: Expr):
        self.new, self.slot = new, slot
        self.loads = _SlotLoads(new, slot)

    def visit_expr(self, e):
        return self.loads.visit(e)

    def visit_Store(self, s: Store):
        s = self.generic_visit(s)
        if id(s.buffer) in self.new:
            return Store(self.new[id(s.buffer)], (self.slot,) + tuple(s.indices), s.value)
        return s

    def visit_TensorCall(self, s: TensorCall):
        s = self.generic_visit(s)
        if not any(id(b) in self.new for b in s.buffers):
            return s
        idx = []
        for b, ix in zip(s.buffers, s.operand_indices()):
            idx += ([self.slot] if id(b) in self.new else []) + list(ix)
        bufs = tuple(self.new.get(id(b), b) for b in s.buffers)
        return TensorCall(s.intrin, s.part, bufs, s.shapes, s.strides, tuple(idx), s.body)


def _i64(v) -> Expr:
    return Const("int64", v) if isinstance(v, int) else v


def add(a: Expr, b) -> Expr:
    """``a + b`` in int64 (``b`` an expression or an int)."""
    return Binary("int64", "add", a, _i64(b))


def sub(a: Expr, b: Expr) -> Expr:
    """``a - b`` in int64; ``a`` itself when ``b`` is the constant 0."""
    return a if isinstance(b, Const) and b.value == 0 else Binary("int64", "sub", a, b)


def invariant(cond: Expr, var) -> bool:
    """``cond`` reads no memory and not ``var``: the same in every iteration of its loop."""
    return not collect(cond, Load) and not any(v is var for v in collect(cond, type(var)))


def flat_compute(compute: list, var):
    """The statements of ``compute`` (``Seq`` s opened) and, when they are one guard
    without ``else`` that loop ``var`` does not change (the warps past a partial tile),
    that guard: ``(guard, flat)``, ``guard`` ``None`` otherwise. The callers split what
    the guard holds and guard each part."""
    flat = []
    for c in compute:
        flat += list(c.stmts) if isinstance(c, Seq) else [c]
    if len(flat) == 1 and isinstance(flat[0], IfThenElse) and flat[0].else_case is None \
            and invariant(flat[0].cond, var):
        return flat[0], flat
    return None, flat
