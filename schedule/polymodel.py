"""The polyhedral model's record types: what ``build_model`` produces and lowering reads.

* :class:`StagePlan`: a compute stage that gets loops (its body after inlining, loops,
  buffer, attach prefix and region);
* :class:`PolyStmt`: one isl statement of a plan (``compute``, ``init``, ``update`` or
  ``round``) with its iteration domain, loop values and accesses;
* :class:`ReadInfo`: one tensor read of a body, as isl text;
* :class:`LoopNode`: one loop of the loop nest, which mirrors the attach tree;
* :class:`Model`: all of them for one schedule.

Their meaning is documented in :mod:`.model`, which builds them (with :mod:`.attach` for
attached stages); this module holds only the records, so that every lowering module can
import them without importing the builders.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polytile.te.expr import Expr, IterVar, Reduce, TensorRead, Var
from polytile.te.reduction import accumulation_dtype
from polytile.te.tensor import Tensor

from . import isl_util as iu
from .kinds import Annotation, ThreadTag
from .loop_ir import Buffer
from .stage import Stage


@dataclass(eq=False)
class ReadInfo:
    """One ``TensorRead`` of a body: its affine index (isl syntax over the axis names
    ``d<k>``, ``None`` if not affine) and the affine condition guarding it (``""`` when
    unguarded, ``None`` if it cannot be expressed)."""

    node: TensorRead
    source: Stage
    indices: list | None
    guard: str | None
    in_init: bool = False


@dataclass(eq=False)
class PolyStmt:
    """An isl statement: ``kind`` is ``compute``, ``init``, ``update`` or ``round``.

    ``domain`` is what the loops enumerate, ``exact`` the instances that really execute
    (equal unless the stage is padded; then ``guard`` is the condition, in isl, that
    separates them). ``sched[j]`` is the
    value of the ``j``-th enclosing loop (``None`` where the statement does not depend
    on it, e.g. a shared buffer under a thread loop). ``axis_map`` maps an instance to
    the values of the compute's axes (then reduce axes, for ``update``).
    """

    name: str
    plan: StagePlan
    kind: str
    dims: list[str]
    domain: isl.Set | None = None
    exact: isl.Set | None = None
    sched: list = field(default_factory=list)
    accesses: dict = field(default_factory=dict)     # key -> (Buffer, PwMultiAff)
    axis_map: isl.PwMultiAff | None = None
    guard: isl.Set | None = None      # padded statements: the exact domain, given the loops

    def tuple(self) -> str:
        return iu.tuple_str(self.name, self.dims)

    def __repr__(self) -> str:
        return f"PolyStmt({self.name}, {self.plan.name}.{self.kind})"


@dataclass(eq=False)
class StagePlan:
    """A compute stage that gets loops."""

    stage: Stage
    index: int
    body: Expr
    axis_vars: list[Var]
    reduce_vars: list[Var]
    leaves: list[IterVar]
    r: int                          # position of the first reduction loop (len(leaves) if none)
    buffer: Buffer
    reads: list[ReadInfo]
    scope: str = "global"
    attach: tuple | None = None     # (StagePlan, leaf position)
    prefix: list = field(default_factory=list)       # enclosing loops: (plan, position)
    prefix_dims: list = field(default_factory=list)  # which of them are coordinates
    ranges: dict = field(default_factory=dict)       # IterVar -> (min, extent)
    leaf_aff: dict = field(default_factory=dict)
    stmts: list[PolyStmt] = field(default_factory=list)
    lo: isl.PwMultiAff | None = None  # region origin per prefix (attached stages)
    where: str | None = None          # the reduction's where= condition, when affine (isl)
    region: tuple = ()                # the region's box extents (attached stages)
    stride: tuple = ()                # per tensor dimension: the region's lattice step
    footprint: isl.Map | None = None  # prefix -> region (attached stages)
    prefixes: isl.Set | None = None  # the prefixes it runs at (attached stages)
    exact_region: isl.Map | None = None  # prefix -> elements really read
    acc: Buffer | None = None         # the wide accumulator of a reduction (see module doc)
    acc_access: dict = field(default_factory=dict)   # statement name -> its index into acc
    tensorize: object = None          # tensorize.Tensorized, set by the tensorize phase
    bodies: tuple = ()                # one body per output (``body`` is the first)
    outs: list = field(default_factory=list)   # one buffer per output (``buffer`` is the first)
    strips: dict = field(default_factory=dict)  # parent IterVar -> Split by a symbolic factor
    owned: dict = field(default_factory=dict)   # tensor dim -> ThreadTag (attach.thread_owned)

    @property
    def name(self) -> str:
        return self.stage.name

    def __repr__(self) -> str:
        return f"StagePlan({self.name})"

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body, Reduce)

    @property
    def prefix_len(self) -> int:
        return len(self.prefix_dims)

    @property
    def root_axes(self) -> list[IterVar]:
        op = self.stage.op
        return list(op.axis) + list(op.reduce_axis)

    def own_names(self, kind: str) -> list[str]:
        n = len(self.axis_vars) + (len(self.reduce_vars) if kind == "update" else 0)
        return [f"d{k}" for k in range(n)]

    def main_stmt(self) -> PolyStmt:
        """The ``compute`` or ``update`` statement (the one inside every loop)."""
        return self.stmts[1] if self.is_reduction else self.stmts[0]

    @property
    def kinds(self) -> list[str]:
        """The statement kinds of the stage, in program order."""
        if not self.is_reduction:
            return ["compute"]
        return ["init", "update"] + (["round"] if self.accumulates_wide else [])

    @property
    def accumulates_wide(self) -> bool:
        """Does this reduction accumulate in a wider dtype than its own (then ``init``
        and ``update`` work on ``acc`` and ``round`` stores the result)?"""
        return self.is_reduction and accumulation_dtype(self.body) != self.body.dtype

    def extent(self, iv: IterVar) -> int:
        return self.ranges[iv][1]

    def stmt_loops(self, kind: str) -> list[int]:
        """Positions (in ``leaves``) of the loops of a statement kind, outermost first
        (``init`` and ``round`` run outside the reduction loops)."""
        if kind not in ("init", "round"):
            return list(range(len(self.leaves)))
        return list(range(self.r)) + [k for k in range(self.r, len(self.leaves))
                                      if self.leaves[k].iter_type != "reduce"]

    def binding(self, pos: int) -> ThreadTag | None:
        """The thread tag loop ``pos`` is bound to, if any (for a symbolic split bound to
        a block and a thread index, the thread index: see :meth:`index_pair`)."""
        iv = self.leaves[pos]
        rel = self.strips.get(iv)
        ann = self.stage.annotations.get(rel.inner if rel is not None else iv)
        return ann if isinstance(ann, ThreadTag) else None

    def fused_into(self, iv) -> object:
        """The outermost fused loop of symbolic extent that loop ``iv`` is part of (a
        symbolic fuse's loops stay separate for isl), else ``None``."""
        top = None
        for rel in self.stage.relations:
            if getattr(rel, "sym", False) is True and (rel.outer is iv or rel.inner is iv
                                                      or rel.outer is top):
                top = rel.fused
                iv = rel.fused
        return top

    def index_pair(self, pos: int) -> tuple | None:
        """``(blockIdx.d, threadIdx.d)`` when loop ``pos`` is a split by a symbolic factor
        ``f`` whose loops are bound to them: the loop's value ``x`` is then
        ``blockIdx.d * f + threadIdx.d``, and the isl parameter of ``blockIdx.d`` (``bx``)
        stands for the block's offset ``blockIdx.d * f`` (``x = bx + tx``, affine)."""
        rel = self.strips.get(self.leaves[pos])
        if rel is None:
            return None
        a, b = (self.stage.annotations.get(rel.outer), self.stage.annotations.get(rel.inner))
        if isinstance(a, ThreadTag) and isinstance(b, ThreadTag):
            return a, b
        return None


@dataclass(eq=False)
class LoopNode:
    """One loop of the nest: loop ``position`` of ``plan``, run by ``stmts`` (filled in
    after the nest is built: statement -> its value of the loop) with children in program
    order."""

    key: int
    plan: StagePlan
    position: int
    children: list = field(default_factory=list)
    stmts: dict = field(default_factory=dict)
    init_only: bool = False

    @property
    def iter_var(self) -> IterVar:
        return self.plan.leaves[self.position]

    def __repr__(self) -> str:
        return f"LoopNode({self.plan.name}.{self.iter_var.name})"

    @property
    def annotation(self) -> Annotation | None:
        rel = self.plan.strips.get(self.iter_var)
        fuse = self.plan.fused_into(self.iter_var)
        if fuse is not None:   # a loop of a symbolic fuse: the fused loop's annotation
            return self.plan.stage.annotations.get(fuse)
        if rel is not None:   # a symbolic split: parallel if either of its loops is
            ann = self.plan.stage.annotations
            got = [ann.get(rel.outer), ann.get(rel.inner)]
            return next((a for a in got if a is not None and not isinstance(a, ThreadTag)),
                        None)
        return self.plan.stage.annotations.get(self.iter_var)

    @property
    def binding(self) -> ThreadTag | None:
        return self.plan.binding(self.position)

    @property
    def index_pair(self) -> tuple | None:
        """See :meth:`StagePlan.index_pair`."""
        return self.plan.index_pair(self.position)


@dataclass(eq=False)
class Model:
    plans: list[StagePlan]
    stmts: dict                      # name -> PolyStmt
    nest: list                       # top-level nodes (LoopNode or PolyStmt leaves)
    loops: dict                      # key -> LoopNode
    buffers: dict                    # Stage -> Buffer
    params: list                     # PrimFunc params (Buffer or Var), in args order
    stage_of: dict                   # id(Operation) -> Stage
    padded: bool = False
    rolled: set = field(default_factory=set)  # keys of unroll loops kept rolled (limits.py)
    outs: dict = field(default_factory=dict)  # (Stage, value_index) -> Buffer, every output

    def buffer_of(self, t: Tensor) -> Buffer:
        st = self.stage_of[id(t.op)]
        return self.outs.get((st, t.value_index)) or self.buffers[st]
