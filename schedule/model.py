"""The polyhedral model of a schedule: statements, domains, accesses, loop nests.

``build_model(sch, args)`` turns a schedule into:

* one :class:`StagePlan` per compute stage that is not inlined, holding the stage's body
  after ``compute_inline`` substitution and the affine expression of each of its loops
  (the stage's *loop map*: split is ``x -> (floor(x/f), x mod f)``, fuse is
  ``(a, b) -> a*E_b + b``);
* one or two :class:`PolyStmt` per plan (``compute``, or ``init`` + ``update`` for a
  reduction) with its isl iteration domain, schedule expressions and access relations;
* the loop *nest*: a tree of :class:`LoopNode` mirroring the attach tree, from which the
  isl schedule tree is assembled (``tree.py``).

An attached stage (``compute_at``) gets an *expanded* domain ``S[p, x]``: for each value
``p`` of the consumer's loop prefix, exactly the points ``x`` the consumer reads there
(the image of the consumer's accesses under the reversed prefix map, as in Tiramisu's
``compute_needed_and_produced``). Its buffer is the bounding box of that region, indexed
by ``x - lo(p)``. Design notes: ``shared/isl/NOTES.md`` §1, §3.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl

from polytile.errors import LoweringError, ScheduleError, format_error
from polytile.te.expr import (Expr, IterVar, Not, Reduce, Select, TensorRead, Var)
from polytile.te.tensor import ComputeOp, PlaceholderOp, Tensor
from polytile.te.visitor import ExprMutator, ExprVisitor, substitute

from . import isl_util as iu
from .loop_ir import Buffer
from .relations import Fuse, Split
from .schedule import Schedule
from .stage import Stage


@dataclass(eq=False)
class ReadInfo:
    """One ``TensorRead`` of a body: its affine index (isl syntax, ``None`` if not affine)
    and the affine condition guarding it (``""`` when unguarded, ``None`` if unknown)."""

    node: TensorRead
    indices: list | None
    guard: str | None


@dataclass(eq=False)
class PolyStmt:
    """An isl statement: ``kind`` is ``compute``, ``init`` or ``update``."""

    name: str
    plan: StagePlan
    kind: str
    dims: list[str]                 # isl names: prefix p<k> then own d<k>
    domain: isl.Set | None = None
    sched: list[str] = field(default_factory=list)   # affine loop values, root first
    accesses: dict = field(default_factory=dict)     # key -> (Buffer, PwMultiAff)

    def tuple(self) -> str:
        return iu.tuple_str(self.name, self.dims)


@dataclass(eq=False)
class StagePlan:
    """A compute stage that gets loops."""

    stage: Stage
    index: int
    body: Expr
    axis_vars: list[Var]
    reduce_vars: list[Var]
    leaves: list[IterVar]
    leaf_aff: dict
    r: int                          # position of the first reduction loop (len(leaves) if none)
    buffer: Buffer
    reads: list[ReadInfo]
    attach: tuple | None = None     # (StagePlan, leaf position)
    prefix_len: int = 0
    stmts: list[PolyStmt] = field(default_factory=list)
    lo: isl.PwMultiAff | None = None  # buffer origin per prefix (attached stages)

    @property
    def name(self) -> str:
        return self.stage.name

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body, Reduce)

    def own_names(self, kind: str) -> list[str]:
        n = len(self.axis_vars) + (len(self.reduce_vars) if kind == "update" else 0)
        return [f"d{k}" for k in range(n)]

    def main_stmt(self) -> PolyStmt:
        return self.stmts[-1]

    def stmt_loops(self, st: PolyStmt) -> list[int]:
        """Positions (in ``leaves``) of the loops of ``st``, outermost first."""
        if st.kind != "init":
            return list(range(len(self.leaves)))
        return list(range(self.r)) + [k for k in range(self.r, len(self.leaves))
                                      if self.leaves[k].iter_type != "reduce"]


@dataclass(eq=False)
class LoopNode:
    """One loop of the nest: loop ``position`` of ``plan``, run by ``stmts`` (filled in
    after the nest is built) with children in program order."""

    key: int
    plan: StagePlan
    position: int
    children: list = field(default_factory=list)
    stmts: dict = field(default_factory=dict)    # PolyStmt -> isl affine value
    init_only: bool = False

    @property
    def iter_var(self) -> IterVar:
        return self.plan.leaves[self.position]

    @property
    def annotation(self) -> str | None:
        return self.plan.stage.annotations.get(self.iter_var)


@dataclass(eq=False)
class Model:
    plans: list[StagePlan]
    stmts: dict                      # name -> PolyStmt
    nest: list                       # top-level nodes (LoopNode or PolyStmt leaves)
    loops: dict                      # key -> LoopNode
    buffers: dict                    # Tensor -> Buffer
    params: list                     # PrimFunc params (Buffer or Var), in args order


def _fail(primitive: str, what: str, expected: str | None = None, **ctx):
    raise ScheduleError(format_error(primitive, what, expected, **ctx))


# inlining -----------------------------------------------------------------------------


class _Inline(ExprMutator):
    def __init__(self, bodies: dict, inlined: set):
        self.bodies = bodies
        self.inlined = inlined

    def visit_TensorRead(self, r: TensorRead):
        idx = tuple(self.visit(i) for i in r.indices)
        op = r.tensor.op
        if id(op) in self.inlined:
            body = self.bodies[op]
            return substitute(body, {iv.var: i for iv, i in zip(op.axis, idx)})
        if any(a is not b for a, b in zip(idx, r.indices)):
            return TensorRead(r.dtype, r.tensor, idx)
        return r


def inline_bodies(sch: Schedule) -> dict:
    """Bodies of every compute op with inlined producers substituted (TVM's
    ``compute_inline``: a pure DSL rewrite before any polyhedral analysis)."""
    inlined = {id(st.op) for st in sch.stages if st.attach_type == "inline"}
    bodies: dict = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            bodies[st.op] = _Inline(bodies, inlined).visit(st.op.body[0])
    return bodies


# reads ----------------------------------------------------------------------------------


class _Reads(ExprVisitor):
    def __init__(self, names: dict):
        self.names = names
        self.guards: list[Expr] = []
        self.out: list[ReadInfo] = []

    def _guard(self) -> str | None:
        parts = []
        for g in self.guards:
            s = iu.condition_str(g, self.names)
            if s is None:
                return None
            parts.append(s)
        return " and ".join(parts)

    def visit_TensorRead(self, r: TensorRead):
        idx = [iu.affine_str(i, self.names) for i in r.indices]
        self.out.append(ReadInfo(r, None if any(i is None for i in idx) else idx,
                                 self._guard()))
        for i in r.indices:
            self.visit(i)

    def visit_Select(self, e: Select):
        self.visit(e.cond)
        self.guards.append(e.cond)
        self.visit(e.true_value)
        self.guards[-1] = Not("bool", e.cond)
        self.visit(e.false_value)
        self.guards.pop()

    def visit_Reduce(self, e: Reduce):
        if e.condition is not None:
            self.visit(e.condition)
            self.guards.append(e.condition)
        self.visit(e.source)
        if e.condition is not None:
            self.guards.pop()
        if e.init is not None:
            self.visit(e.init)


# loop maps --------------------------------------------------------------------------------


def leaf_affines(stage: Stage, root_names: dict) -> dict:
    """Affine value (isl syntax) of every iteration variable of ``stage`` in terms of the
    root axes, following its split and fuse relations."""
    aff = {iv: root_names[iv] for iv in root_names}
    for rel in stage.relations:
        if isinstance(rel, Split):
            p = aff[rel.parent]
            lo = rel.parent.dom.min if rel.parent in root_names else 0
            base = f"({p} - {lo})" if lo else p
            aff[rel.outer] = f"floor(({base})/{rel.factor})"
            aff[rel.inner] = f"(({base}) mod {rel.factor})"
        elif isinstance(rel, Fuse):
            lo_o = rel.outer.dom.min if rel.outer in root_names else 0
            lo_i = rel.inner.dom.min if rel.inner in root_names else 0
            ext = stage.extent_of(rel.inner)
            aff[rel.fused] = (f"({ext} * ({aff[rel.outer]} - {lo_o}) + "
                              f"({aff[rel.inner]} - {lo_i}))")
    return aff


# building the model ------------------------------------------------------------------------


def _unique_names(sch: Schedule) -> dict:
    names: dict = {}
    used: set[str] = set()
    for st in sch.stages:
        base = st.name
        n, k = base, 1
        while n in used:
            n, k = f"{base}_{k}", k + 1
        used.add(n)
        names[st.op] = n
    return names


def _params(sch: Schedule, args, bodies: dict, names: dict) -> tuple[dict, list]:
    if args is None:
        _fail("lower", "args is missing", "pass the list of input and output tensors, e.g. "
              "[A, B, C]")
    buffers: dict = {}
    params: list = []
    seen: set[int] = set()
    for a in args:
        if isinstance(a, Tensor):
            if id(a) in seen:
                _fail("lower", f"tensor {a.name!r} appears twice in args")
            seen.add(id(a))
            if a.op not in sch.stage_map:
                _fail("lower", f"tensor {a.name!r} in args is not part of the schedule",
                      "pass tensors of this computation")
            st = sch.stage_map[a.op]
            if st.attach_type == "inline":
                _fail("lower", f"tensor {a.name!r} in args is inlined (compute_inline)",
                      "an argument needs storage: do not inline it")
            if st.attach_type == "scope":
                _fail("compute_at", f"stage {a.name!r} is in args but computed at "
                      f"{st.attach_stage.name!r}: only parts of it would be written",
                      "leave argument tensors at the root")
            b = Buffer(names[a.op], a.shape, a.dtype, "global")
            buffers[a] = b
            params.append(b)
        elif isinstance(a, Var):
            params.append(a)
        else:
            _fail("lower", f"argument {a!r} is neither a tensor nor a te.var",
                  "pass tensors (placeholders and computes) and scalar te.var")
    for op in sch.outputs:
        if op.output(0) not in buffers:
            _fail("lower", f"output {op.name!r} of the schedule is not in args",
                  "add it to args")
    return buffers, params


def build_model(sch: Schedule, args) -> Model:
    """Build the polyhedral model of ``sch`` with function arguments ``args``.

    Raises
    ------
    ScheduleError
        For argument lists that do not match the schedule, attaches whose consumers are
        not inside the attach loop, or reads out of bounds.
    """
    names = _unique_names(sch)
    bodies = inline_bodies(sch)
    buffers, params = _params(sch, args, bodies, names)
    plans: list[StagePlan] = []
    plan_of: dict = {}
    for st in sch.stages:
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        plan = _make_plan(st, len(plans), bodies[st.op], names, buffers)
        plans.append(plan)
        plan_of[st.op] = plan
    _check_inputs(plans, buffers, sch)
    consumers = _consumers(plans)
    for p in plans:
        st = p.stage
        if st.attach_type == "scope":
            target = st.attach_stage
            if target.attach_type == "inline":
                _fail("compute_at", f"stage {p.name!r} is attached to {target.name!r}, which "
                      f"is inlined", "attach to a stage that has loops")
            tp = plan_of[target.op]
            p.attach = (tp, tp.leaves.index(st.attach_ivar))
    # consumers before producers: an attach target (a consumer) is lowered before the stages
    # attached to it, and a stage's footprint needs the domains of all its consumers
    order = list(reversed(plans))
    for p in order:
        p.prefix_len = 0 if p.attach is None else p.attach[0].prefix_len + p.attach[1] + 1
        _make_stmts(p)
    nest, loops = _build_nest(plans)
    _check_scopes(plans, consumers, loops)
    stmts = {s.name: s for p in plans for s in p.stmts}
    for p in order:
        _domains(p, consumers[id(p)])
    for p in plans:
        buffers[p.stage.op.output(0)] = p.buffer
    for p in plans:
        _accesses(p, plan_of, buffers)
    return Model(plans, stmts, nest, loops, buffers, params)


def _make_plan(st: Stage, index: int, body: Expr, names: dict, buffers: dict) -> StagePlan:
    op = st.op
    axis_vars = [iv.var for iv in op.axis]
    reduce_vars = [iv.var for iv in op.reduce_axis]
    root_names = {iv: f"d{k}" for k, iv in enumerate(list(op.axis) + list(op.reduce_axis))}
    leaf_aff = leaf_affines(st, root_names)
    leaves = list(st.leaf_iter_vars)
    r = next((k for k, iv in enumerate(leaves) if iv.iter_type == "reduce"), len(leaves))
    t = op.output(0)
    buf = buffers.get(t)
    if buf is None:
        buf = Buffer(names[op], t.shape, t.dtype, "intermediate")
        buffers[t] = buf
    var_names = {v: f"d{k}" for k, v in enumerate(axis_vars + reduce_vars)}
    rd = _Reads(var_names)
    rd.visit(body)
    return StagePlan(st, index, body, axis_vars, reduce_vars, leaves, leaf_aff, r, buf,
                     rd.out)


def _check_inputs(plans: list[StagePlan], buffers: dict, sch: Schedule) -> None:
    for p in plans:
        for rd in p.reads:
            t = rd.node.tensor
            if isinstance(t.op, PlaceholderOp) and t not in buffers:
                _fail("lower", f"input {t.name!r} is read by stage {p.name!r} but is not in "
                      f"args", "add it to args")
            if t.op not in sch.stage_map:
                _fail("lower", f"stage {p.name!r} reads {t.name!r}, which is not part of the "
                      f"schedule")


def _consumers(plans: list[StagePlan]) -> dict:
    by_tensor = {id(p.stage.op.output(0)): p for p in plans}
    out: dict = {id(p): [] for p in plans}
    for c in plans:
        for rd in c.reads:
            prod = by_tensor.get(id(rd.node.tensor))
            if prod is not None and not any(x is c for x in out[id(prod)]):
                out[id(prod)].append(c)
    return out


def _make_stmts(p: StagePlan) -> None:
    prefix = [f"p{k}" for k in range(p.prefix_len)]
    base = f"S{p.index}"
    kinds = ["init", "update"] if p.is_reduction else ["compute"]
    p.stmts = []
    for kind in kinds:
        name = base if kind == "compute" else f"{base}_{kind}"
        st = PolyStmt(name, p, kind, prefix + p.own_names(kind))
        st.sched = prefix + [p.leaf_aff[p.leaves[k]] for k in p.stmt_loops(st)]
        p.stmts.append(st)


# the nest ---------------------------------------------------------------------------------


def _build_nest(plans: list[StagePlan]) -> tuple[list, dict]:
    attached: dict = {}
    for p in plans:
        if p.attach is not None:
            attached.setdefault((id(p.attach[0]), p.attach[1]), []).append(p)
    loops: dict = {}

    def new_loop(plan, pos, init_only=False):
        node = LoopNode(len(loops), plan, pos, init_only=init_only)
        loops[node.key] = node
        return node

    def init_branch(p: StagePlan) -> list:
        init = p.stmts[0]
        positions = p.stmt_loops(init)[p.r:]
        nodes: list = [init]
        for pos in reversed(positions):
            n = new_loop(p, pos, init_only=True)
            n.children = nodes
            nodes = [n]
        return nodes

    def chain(p: StagePlan, pos: int) -> list:
        if pos == len(p.leaves):
            return [p.main_stmt()]
        node = new_loop(p, pos)
        kids: list = []
        for q in attached.get((id(p), pos), []):
            kids += stage_nodes(q)
        if p.is_reduction and pos + 1 == p.r:
            kids += init_branch(p)
        kids += chain(p, pos + 1)
        node.children = kids
        return [node]

    def stage_nodes(p: StagePlan) -> list:
        out: list = []
        if p.is_reduction and p.r == 0:
            out += init_branch(p)
        return out + chain(p, 0)

    nest: list = []
    for p in plans:
        if p.attach is None:
            nest += stage_nodes(p)
    _fill_loop_stmts(nest, 0)
    return nest, loops


def _fill_loop_stmts(nodes: list, depth: int) -> list:
    """Set ``LoopNode.stmts`` to every statement below the loop, with its value there:
    the loop's own affine value for the loop's stage, the prefix coordinate ``p<depth>``
    for stages attached below. Returns the statements of ``nodes``."""
    found: list = []
    for n in nodes:
        if isinstance(n, PolyStmt):
            found.append(n)
            continue
        below = _fill_loop_stmts(n.children, depth + 1)
        for st in below:
            if st.plan is n.plan:
                n.stmts[st] = n.plan.leaf_aff[n.iter_var]
            else:
                n.stmts[st] = f"p{depth}"
        found += below
    return found


def _check_scopes(plans: list[StagePlan], consumers: dict, loops: dict) -> None:
    """Every statement reading an attached stage must run inside its attach loop."""
    inside: dict = {}
    for node in loops.values():
        for st in node.stmts:
            inside.setdefault(id(node), set()).add(id(st))
    for p in plans:
        if p.attach is None:
            continue
        tp, pos = p.attach
        scope = next(n for n in loops.values()
                     if n.plan is tp and n.position == pos and not n.init_only)
        for c in consumers[id(p)]:
            for st in c.stmts:
                if _stmt_reads(st, p) and id(st) not in inside[id(scope)]:
                    _fail("compute_at", f"stage {p.name!r} is computed at "
                          f"{tp.name!r}.{tp.leaves[pos].name!r}, but stage {c.name!r} "
                          f"({st.kind}) also reads it outside that loop",
                          f"attach {p.name!r} where all its consumers run, or compute it "
                          f"at root")


def _stmt_reads(st: PolyStmt, p: StagePlan) -> bool:
    body = st.plan.body
    if st.kind == "init":
        if not isinstance(body, Reduce) or body.init is None:
            return False
        from polytile.te.visitor import collect

        return any(r.tensor is p.stage.op.output(0) for r in collect(body.init, TensorRead))
    return True


# domains and accesses ------------------------------------------------------------------------


def _tensor_box(t: Tensor, tname: str) -> isl.Set:
    dims = [f"x{k}" for k in range(len(t.shape))]
    return isl.Set(f"{{ {iu.tuple_str(tname, dims)} : "
                   f"{iu.box_str(dims, [(0, s) for s in t.shape])} }}")


def _own_box(p: StagePlan, kind: str) -> str:
    op = p.stage.op
    ivs = list(op.axis) + (list(op.reduce_axis) if kind == "update" else [])
    return iu.box_str(p.own_names(kind), [(iv.dom.min, iv.dom.extent) for iv in ivs])


def _domains(p: StagePlan, consumers: list[StagePlan]) -> None:
    if p.attach is None:
        for st in p.stmts:
            st.domain = isl.Set(f"{{ {st.tuple()} : {_own_box(p, st.kind)} }}")
        return
    t = p.stage.op.output(0)
    tname = "T_prod"
    m = p.prefix_len
    needed = None
    for c in consumers:
        for st in c.stmts:
            if not _stmt_reads(st, p):
                continue
            for rd in c.reads:
                if rd.node.tensor is not t:
                    continue
                if rd.indices is None:
                    _fail("compute_at", f"stage {c.name!r} reads {p.name!r} at a non-affine "
                          f"index {rd.node}", f"attach only stages read with affine indices "
                          f"(or compute {p.name!r} at root)")
                acc = isl.Map(f"{{ {st.tuple()} -> {tname}[{', '.join(rd.indices)}] }}")
                acc = acc.intersect_domain(st.domain)
                pre = isl.Map(f"{{ {st.tuple()} -> [{', '.join(f'({a})' for a in st.sched[:m])}]"
                              f" }}")
                need = pre.reverse().apply_range(acc)
                needed = need if needed is None else needed.union(need)
    if needed is None:
        from polytile.errors import InternalError

        raise InternalError(f"attached stage {p.name} has no reads")
    needed = needed.intersect_range(_tensor_box(t, tname)).coalesce()
    flat = needed.wrap().flatten()
    init_like = p.stmts[0]
    nx = len(t.shape)
    p.stmts[0].domain = flat.set_tuple_name(init_like.name)
    if p.is_reduction:
        upd = p.stmts[1]
        src = [f"z{k}" for k in range(m + nx)]
        rnames = [f"r{k}" for k in range(len(p.reduce_vars))]
        rbox = iu.box_str(rnames, [(iv.dom.min, iv.dom.extent) for iv in p.stage.op.reduce_axis])
        ext = isl.Map(f"{{ [{', '.join(src)}] -> {upd.name}[{', '.join(src + rnames)}] : "
                      f"{rbox} }}")
        upd.domain = flat.apply(ext)
    p.lo = _origins(needed, nx)
    p.buffer = Buffer(p.buffer.name, tuple(_extents(needed, nx)), p.buffer.dtype,
                      p.buffer.scope)


def _origins(needed: isl.Map, nx: int) -> isl.PwMultiAff:
    pma = None
    for q in range(nx):
        lo = isl.PwMultiAff.from_pw_aff(needed.dim_min(q))
        pma = lo if pma is None else pma.flat_range_product(lo)
    return pma


def _extents(needed: isl.Map, nx: int) -> list[int]:
    out = []
    for q in range(nx):
        span = needed.dim_max(q).sub(needed.dim_min(q)).max_val()
        if not span.is_int():
            raise LoweringError(f"compute_at: the footprint of dimension {q} is unbounded")
        out.append(span.to_python() + 1)
    return out


def _prefix_pma(st: PolyStmt, m: int) -> isl.PwMultiAff:
    return isl.PwMultiAff(f"{{ {st.tuple()} -> [{', '.join(f'({a})' for a in st.sched[:m])}] }}")


def _relative(acc: isl.PwMultiAff, owner: StagePlan, st: PolyStmt, bname: str
              ) -> isl.PwMultiAff:
    """``acc - lo(prefix)`` for an access to the buffer of attached stage ``owner``."""
    if owner.attach is None:
        return acc
    lo = owner.lo.pullback_pw_multi_aff(_prefix_pma(st, owner.prefix_len))
    rel = acc.reset_tuple_id(isl.dim_type.out).sub(lo)
    return rel.set_tuple_id(isl.dim_type.out, isl.Id(bname))


def _accesses(p: StagePlan, plan_of: dict, buffers: dict) -> None:
    for st in p.stmts:
        own = st.dims[p.prefix_len:p.prefix_len + len(p.axis_vars)]
        w = isl.PwMultiAff(f"{{ {st.tuple()} -> B[{', '.join(own)}] }}")
        st.accesses["w"] = (p.buffer, _relative(w, p, st, "B"))
        if st.kind == "init":
            continue
        for rd in p.reads:
            if rd.indices is None:
                continue
            src = rd.node.tensor
            owner = plan_of.get(src.op)
            acc = isl.PwMultiAff(f"{{ {st.tuple()} -> B[{', '.join(rd.indices)}] }}")
            _check_in_bounds(p, st, rd, src)
            if owner is None:
                st.accesses[id(rd.node)] = (buffers[src], acc)
            else:
                st.accesses[id(rd.node)] = (owner.buffer, _relative(acc, owner, st, "B"))


def _check_in_bounds(p: StagePlan, st: PolyStmt, rd: ReadInfo, src: Tensor) -> None:
    if rd.guard is None:
        return  # guarded by a condition isl cannot see: cannot prove either way
    dom = st.domain
    if rd.guard:
        g = isl.Set(f"{{ {st.tuple()} : {rd.guard} }}")
        dom = dom.intersect(g)
    acc = isl.Map(f"{{ {st.tuple()} -> T_src[{', '.join(rd.indices)}] }}").intersect_domain(dom)
    outside = acc.subtract_range(_tensor_box(src, "T_src"))
    if outside.is_empty():
        return
    pt = outside.wrap().sample_point()
    n_in = len(st.dims)
    coords = iu.point_coords(pt, n_in + len(src.shape))
    own = coords[p.prefix_len:n_in]
    allv = p.axis_vars + p.reduce_vars
    at = ", ".join(f"{v.name}={c}" for v, c in zip(allv, own))
    _fail("lower", f"stage {p.name!r} reads {src.name}[{', '.join(map(str, coords[n_in:]))}] "
          f"outside its shape {src.shape} (at {at})",
          "every read must stay inside its tensor",
          Read=str(rd.node), hint="guard padded reads with te.if_then_else")
