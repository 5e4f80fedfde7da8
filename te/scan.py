"""Recurrences: ``te.scan`` (TVM v0.19's ``ScanOp``).

``S = te.scan(init, update, state)`` defines ``S`` of the shape of ``update`` (``T`` time
steps first): rows ``t < L`` (``L = init.shape[0]``) are ``init[t, ...]``, each later row is
``update[t, ...]`` where ``update`` reads ``state[t - 1, ...]`` (any earlier row) as the
already computed rows of ``S``. A read of the current row or a later one is refused by
``lower`` (``ScheduleError`` naming the reading and the writing instance). With lists of
tensors a scan carries several states and returns one tensor per state; their updates are
either the outputs of one multi-output compute or separate computes (TVM's
``test_scan_multi_out`` form), of one shape ``[T, ...]``, or of widths that differ (TVM's
scan tutorial, "multiple states"): the narrower states then run in the widest one's loop
nest, guarded to their own extents, and are returned at their own shape by a compute
``{name}.state{k}`` that reads them out of the padded buffer. Where symbolic widths differ
(``n`` and ``l``, both ``te.var``), the largest is not affine: the loop nest runs over
their sum, every state guarded to its own width (its buffer that wide).

In polytile a scan is one compute stage that reads its own buffer: its body is
``if_then_else(t < L, init[t, ...], update's body)`` with every read of ``state`` redirected
to the scan's own output (computes between ``update`` and ``state`` are inlined; ``init``
stays a stage of its own, which ``s[init]`` schedules). The stage's axes *are*
``update.op.axis`` (``scan_axis`` is the first), and ``s[update]`` is the scan's stage, so
TVM's ``s[s_update].split(s_update.op.axis[1], ...)`` schedules it. With separate update
computes the axes are those of the first one; the states share one loop nest, and
``s[u]`` of any update ``u`` is that stage, scheduled through ``u.op.axis`` as well (axis
``k`` of ``u`` stands for axis ``k`` of the first update: TVM could give each update its
own loops, polytile computes all states of a step in one statement, so a second schedule
of the same axis raises "already split"). The dependence of a row
on earlier rows is an exact dependence of the stage (``schedule/deps.py``): the scan axis
stays serial (``parallel``, ``vectorize``, ``bind`` or a reorder that runs a row before
the rows it reads are refused with a violating pair), the spatial axes can be split,
reordered, parallelized and bound. A scan is computed at the root (not inlined, not
computed at another stage, not cache_write'd).

Reference: TVM's scan tutorial (cumulative sum over rows) and ``te.scan``.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytile.errors import DefinitionTypeError, DefinitionValueError, format_error

from . import symbolic as sym
from .expr import And, Cast, Cmp, Const, IterVar, Range, Reduce, Select, TensorRead, Var
from .tensor import ComputeOp, PlaceholderOp, Tensor, compute
from .visitor import ExprMutator, collect, substitute


@dataclass(frozen=True, eq=False)
class ScanOp(ComputeOp):
    """A recurrence over the first axis (see the module docstring). ``axis`` is
    ``update.op.axis`` (``scan_axis`` first, over all ``T`` rows); ``body`` selects the
    ``init`` rows and the update rows, the latter reading the op's own outputs."""

    init: tuple = ()
    update: tuple = ()
    state_placeholder: tuple = ()
    inputs: tuple = ()
    #: the computes between the updates and the states (they read a state), inlined into
    #: the step; ``s[t]`` of one of them is a :class:`~polytile.schedule.schedule.ScanStep`
    steps: tuple = ()
    #: what ``te.scan`` returned, one tensor per state: an output of this op, or for a
    #: state narrower than the loop nest its ``{name}.state{k}`` compute (TVM returns the
    #: outputs of one op, so ``create_schedule`` of one of them schedules every state)
    results: tuple = ()

    def axis_alias(self) -> dict:
        """``{id(axis k of a later update compute): axis k of the stage}`` (several states
        with one compute each: ``s[u].split(u.op.axis[1], ...)`` for any of them)."""
        return {id(a): b for u in self.update for a, b in zip(u.op.axis, self.axis)
                if a is not b}

    @property
    def scan_axis(self):
        """The time axis (TVM's ``ScanOp.scan_axis``; here over all rows, ``[0, T)``)."""
        return self.axis[0]

    @property
    def spatial_axis_(self) -> tuple:
        """The other axes (TVM's ``spatial_axis_``)."""
        return self.axis[1:]

    @property
    def input_tensors(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for b in self.body:
            for r in collect(b, TensorRead):
                if r.tensor.op is not self:
                    seen.setdefault(id(r.tensor), r.tensor)
        return list(seen.values())


def _as_list(x, what: str) -> list:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, Tensor) for t in x):
        return list(x)
    raise DefinitionTypeError(format_error("scan", f"{what} is {x!r}",
                                           "a tensor or a non-empty list of tensors"))


class _State(ExprMutator):
    """Reads of a state become reads of the scan's output; computes between ``update`` and
    the states are inlined (their values at step ``t`` need the rows of this scan)."""

    def __init__(self, states: list, outputs, reads_state):
        self.states = {id(s.op): k for k, s in enumerate(states)}
        self.outputs = outputs
        self.reads_state = reads_state

    def visit_TensorRead(self, r: TensorRead):
        idx = tuple(self.visit(i) for i in r.indices)
        k = self.states.get(id(r.tensor.op))
        if k is not None:
            return TensorRead(r.dtype, self.outputs[k], idx)
        op = r.tensor.op
        if op is self.outputs[0].op:   # already redirected (an inlined index revisited)
            return TensorRead(r.dtype, r.tensor, idx)
        if isinstance(op, ComputeOp) and self.reads_state(op):
            body = op.body[r.tensor.value_index]
            if isinstance(body, Reduce):
                raise DefinitionTypeError(format_error(
                    "scan", f"the update reads {op.name!r}, a reduction over the state",
                    "elementwise computes between update and state_placeholder (they are "
                    "inlined into the scan)"))
            return self.visit(substitute(body, {iv.var: i for iv, i in zip(op.axis, idx)}))
        if any(a is not b for a, b in zip(idx, r.indices)):
            return TensorRead(r.dtype, r.tensor, idx)
        return r


def _ops_between(bodies, reads_state) -> list:
    """The compute ops the update bodies read (transitively) that read a state."""
    out: list = []
    todo = [r.tensor.op for b in bodies for r in collect(b, TensorRead)]
    while todo:
        op = todo.pop()
        if not isinstance(op, ComputeOp) or any(op is o for o in out) or not reads_state(op):
            continue
        out.append(op)
        todo += [t.op for t in op.input_tensors]
    return out


def scan(init, update, state_placeholder, inputs=None, name: str = "scan", tag: str = "",
         attrs=None):
    """A recurrence over the first axis (TVM's ``te.scan``; see the module docstring).

    Parameters
    ----------
    init : Tensor[L, ...] or list of them
        The first ``L >= 1`` rows of each state (the scan axis runs ``[L, T)``); ``L``
        may be symbolic (``1 <= L <= T`` is then checked at each call). Every state has
        the same ``L`` and the same ``T`` (TVM's rule: one scan axis).
    update : Tensor[T, ...] or list of them
        Row ``t >= L`` of each state, reading earlier rows through ``state_placeholder``;
        all outputs of one compute, without a reduction.
    state_placeholder : Tensor[T, ...] or list of them
        Placeholders standing for the states, of the shape and dtype of ``update``.
    inputs : list of Tensor, optional
        Accepted for TVM compatibility (the inputs are found from the bodies).
    name, tag, attrs
        As for :func:`polytile.te.compute`.

    Returns
    -------
    Tensor, or a list of Tensor for lists: the states, shape ``[T, ...]``.

    Raises
    ------
    TypeError, ValueError
        For mismatched counts, shapes or dtypes, a state that is not a placeholder, an
        update that is not a compute, a reduction in the update, ``L`` not in
        ``[1, T]``, or states of different ``L`` or ``T``.
    """
    single = isinstance(init, Tensor)
    inits = _as_list(init, "init")
    updates = _as_list(update, "update")
    states = _as_list(state_placeholder, "state_placeholder")
    if not len(inits) == len(updates) == len(states):
        raise DefinitionValueError(format_error(
            "scan", f"{len(inits)} init, {len(updates)} update and {len(states)} state "
            f"tensors", "one of each per state"))
    uop = updates[0].op
    for u in updates:
        if not isinstance(u.op, ComputeOp) or isinstance(u.op, ScanOp):
            raise DefinitionTypeError(format_error(
                "scan", f"update {u.name!r} is not a te.compute",
                "te.compute tensors (several states: the outputs of one multi-output "
                "compute, or one compute per state)"))
        if u.op.reduce_axis:
            raise DefinitionTypeError(format_error(
                "scan", f"update {u.op.name!r} is a reduction", "an elementwise update",
                hint="compute the reduction in a compute that the update reads"))
        if not u.op.axis:
            raise DefinitionValueError(format_error("scan", f"update {u.op.name!r} has no "
                                                    "axes", "a time axis first"))
    common = _common_shape(updates, name)
    uop = next((u.op for u in updates if sym.same_shape(u.shape, common)), None)
    if uop is None:   # symbolic widths that differ: a loop nest of their sum
        uop = _Axes(tuple(_padded_axis(a, e) for a, e in zip(updates[0].op.axis, common)))
    steps = updates[0].shape[0]
    rows = inits[0].shape[0] if inits[0].ndim else 0
    for i, u, s in zip(inits, updates, states):
        if not isinstance(s.op, PlaceholderOp):
            raise DefinitionTypeError(format_error(
                "scan", f"state_placeholder {s.name!r} is not a placeholder",
                "te.placeholder of the state's shape"))
        if (not sym.same_shape(s.shape, u.shape) or not sym.same_shape(i.shape[1:], u.shape[1:])
                or i.ndim != u.ndim):
            raise DefinitionValueError(format_error(
                "scan", f"shapes init {i.shape}, update {u.shape}, state {s.shape} do not "
                f"agree", "state and update of one shape [T, ...], init [L, ...] with the "
                "same trailing dimensions"))
        if not s.dtype == u.dtype == i.dtype:
            raise DefinitionTypeError(format_error(
                "scan", f"dtypes init {i.dtype}, update {u.dtype}, state {s.dtype}",
                "one dtype per state"))
        if not sym.same(i.shape[0], rows):
            raise DefinitionValueError(format_error(
                "scan", f"init tensors have {sym.text(i.shape[0])} and {sym.text(rows)} "
                "rows", "equal row counts: the scan axis of every state starts at "
                "init.shape[0] (TVM's rule)"))
    if sym.is_static(rows) and (not 1 <= rows or sym.is_static(steps) and not rows <= steps):
        raise DefinitionValueError(format_error(
            "scan", f"init has {rows} rows for {steps} steps", "1 <= init.shape[0] <= "
            "update.shape[0]"))
    state_ops = {id(s.op) for s in states}
    memo: dict = {}

    def reads_state(op) -> bool:
        if id(op) not in memo:
            memo[id(op)] = False
            memo[id(op)] = any(id(t.op) in state_ops or reads_state(t.op)
                               for t in op.input_tensors)
        return memo[id(op)]

    # each update's body over the widest update's axes (one loop nest for every state)
    bodies = tuple(u.op.body[u.value_index] if u.op is uop else substitute(
        u.op.body[u.value_index], {a.var: b.var for a, b in zip(u.op.axis, uop.axis)})
        for u in updates)
    op = ScanOp(name=name, tag=tag, attrs=dict(attrs or {}), axis=uop.axis, reduce_axis=(),
                body=bodies, init=tuple(inits), update=tuple(updates),
                state_placeholder=tuple(states), inputs=tuple(inputs or ()))
    t = uop.axis[0].var
    bound = Const(t.dtype, sym.static(rows)) if sym.is_static(rows) else sym.as_expr(rows)
    if bound.dtype != t.dtype:
        bound = Cast(t.dtype, bound)
    first = Cmp("bool", "lt", t, bound)
    ivars = [iv.var for iv in uop.axis]
    new = []
    for i, b, u in zip(inits, bodies, updates):
        upd = _State(states, op.outputs, reads_state).visit(b)
        val = Select(b.dtype, first, TensorRead(i.dtype, i, tuple(ivars)), upd)
        inside = _inside(ivars, u.shape, common)
        if inside is not None:   # a narrower state: nothing past its own extents
            val = Select(b.dtype, inside, val, Const(b.dtype, 0))
        new.append(val)
    # the body reads the op's own outputs, which exist only once the op does
    object.__setattr__(op, "body", tuple(new))
    object.__setattr__(op, "steps", tuple(
        o for o in _ops_between(bodies, reads_state) if all(o is not u.op for u in updates)))
    outs = list(op.outputs)
    for k, u in enumerate(updates):
        if not sym.same_shape(u.shape, common):   # the state's own extents, out of the pad
            outs[k] = compute(tuple(u.shape), lambda *i, t=outs[k]: t[i],
                              name=f"{name}.state{k}")
    object.__setattr__(op, "results", tuple(outs))
    return outs[0] if single else outs


def _common_shape(updates, name: str = "scan") -> tuple:
    """The shape of the loop nest of a scan whose states may differ in constant extents
    (TVM's scan tutorial, "multiple states"): per dimension the one symbolic extent they
    share, or the largest constant; it must be the shape of one of the updates."""
    rank = updates[0].ndim
    if any(u.ndim != rank for u in updates):
        raise DefinitionValueError(format_error(
            "scan", f"updates of ranks {[u.ndim for u in updates]}", "states of one rank "
            "[T, ...] (they are computed in one loop nest)"))
    common = []
    for q in range(rank):
        exts = [u.shape[q] for u in updates]
        if all(sym.same(e, exts[0]) for e in exts):
            common.append(exts[0])
        elif q > 0 and all(sym.is_static(e) for e in exts):
            common.append(max(sym.static(e) for e in exts))
        elif q == 0:
            ups = ", ".join(f"{u.name!r}" for u in updates)
            raise DefinitionValueError(format_error(
                "scan", f"states of the time extents {[sym.text(e) for e in exts]} "
                "(dimension 0)", "one time extent for every state: the states of one scan "
                "step together, over one scan axis [init.shape[0], update.shape[0]) (TVM "
                "refuses them too)", hint="scan the shorter state in a scan of its own, or "
                "give every state the longest time extent", Scan=f"{name!r}, updates {ups}"))
        elif all(sym.is_affine(e) for e in exts):
            # the largest of symbolic extents is not affine; their sum bounds it (extents
            # are >= 0): the loop nest runs it, each state guarded to its own extent
            distinct: list = []
            for e in exts:
                if not any(sym.same(e, d) for d in distinct):
                    distinct.append(e)
            total = 0
            for e in distinct:
                total = sym.add(total, e)
            common.append(total)
        else:
            ups = ", ".join(f"{u.name!r}" for u in updates)
            raise DefinitionValueError(format_error(
                "scan", f"states of the extents {[sym.text(e) for e in exts]} in dimension "
                f"{q}", "one time extent, and in each other dimension one symbolic extent "
                "or constants (narrower states are padded to the largest; the largest of "
                "two symbolic extents is not affine)",
                hint="give the states the same symbolic extent, or constant extents",
                Scan=f"{name!r}, updates {ups}"))
    if all(sym.is_static(e) for e in common[1:]) and not any(
            sym.same_shape(u.shape, common) for u in updates):
        raise DefinitionValueError(format_error(
            "scan", f"states of the shapes {[list(u.shape) for u in updates]}", "one state "
            "as large as all others in every dimension (the loop nest is its)"))
    return tuple(common)


def _inside(ivars, shape, common):
    """``ivars < shape`` where ``shape`` is narrower than ``common``, else None."""
    cond = None
    for v, e, c in zip(ivars, shape, common):
        if sym.same(e, c):
            continue
        bound = Const(v.dtype, sym.static(e)) if sym.is_static(e) else sym.as_expr(e)
        if bound.dtype != v.dtype:
            bound = Cast(v.dtype, bound)
        one = Cmp("bool", "lt", v, bound)
        cond = one if cond is None else And("bool", cond, one)
    return cond


@dataclass(frozen=True, eq=False)
class _Axes:
    """The loop nest of a scan whose states have symbolic widths that differ: only its
    ``axis`` (new axes over the sum of the widths, see :func:`_common_shape`)."""

    axis: tuple


def _padded_axis(a: IterVar, extent) -> IterVar:
    """An axis like ``a`` over ``[0, extent)`` (``a`` itself when the extent is its own)."""
    if sym.same(a.dom.extent, extent):
        return a
    return IterVar(Var(a.var.dtype, a.var.name, True), Range(0, extent), a.iter_type)
