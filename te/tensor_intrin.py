"""Tensor intrinsics: what a hardware (or library) micro-kernel computes, and its code.

``decl_tensor_intrin(op, fcompute)`` (TVM v0.19's ``te.decl_tensor_intrin``) pairs

* ``op``, a compute operation over small placeholders: the *semantics* of the
  intrinsic (``c[i] = sum(a[k] * b[i, k], k)`` for a gemv micro-kernel), and
* ``fcompute(ins, outs)``, which returns the *code* of one call given buffer views of the
  regions it works on (:class:`polytile.tir.BufferView`): a statement built with
  :mod:`polytile.tir` (``call_extern``, ``ir_builder``...), or for a reduction the triple
  ``(body, reset, update)``: ``body`` computes the whole reduction, ``reset`` stores the
  identity, ``update`` accumulates one more slice of the reduction into the output.

``s[C].tensorize(axis, intrin)`` replaces the loop nest under ``axis`` by calls of the
intrinsic once lowering has checked, with isl, that the nest computes exactly ``op`` up to a
renaming of the loops and an offset of every access (:mod:`polytile.schedule.tensorize`).

This module holds only the declaration (a record); buffers and code belong to
:mod:`polytile.tir`, matching and lowering to :mod:`polytile.schedule.tensorize`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from polytile.errors import DefinitionTypeError, DefinitionValueError, format_error

from .expr import Reduce
from .tensor import ComputeOp, PlaceholderOp, Tensor

@dataclass(frozen=True)
class AsyncGroup:
    """The protocol of an intrinsic whose ``update`` only *issues* its work (Hopper
    ``wgmma.mma_async``): it reads its inputs at some time before the issuing thread's
    next ``wait(n)`` that retires it. The calls of one iteration of a pipelined loop
    (``Stage.pipeline(..., mma_wait=n)``) form one group: ``begin`` before the first call,
    ``commit`` after the last, then ``wait(n)`` (at most ``n`` groups still in flight), and
    ``fence`` in every thread before the barrier that publishes the operands (a proxy
    fence: the instruction reads shared memory through another memory proxy). Each field
    is the name of an intrinsic call of the target (``tir.call_intrin``); ``wait`` takes
    the count. The reference interpreter checks the protocol: a write to an operand of an
    issued, unretired call, or a read of its output, is a ``RaceError``."""

    fence: str
    begin: str
    commit: str
    wait: str

    def __post_init__(self):
        for role in ("fence", "begin", "commit", "wait"):
            ASYNC_GROUP_CALLS[getattr(self, role)] = (self, role)


#: call name -> (AsyncGroup, role): how the reference interpreter recognises the protocol
ASYNC_GROUP_CALLS: dict = {}


#: Declared intrinsics by name (a recorded ``tensorize`` step replays through it).
REGISTRY: dict[str, "TensorIntrin"] = {}


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A declared tensor intrinsic (see the module docstring).

    Attributes
    ----------
    name : str
    op : ComputeOp
        The semantics: one output, reading only placeholders.
    fcompute : callable
        ``fcompute(ins, outs) -> Stmt | (Stmt, Stmt, Stmt)``.
    inputs : tuple of Tensor
        The placeholders ``op`` reads, in order of first use (the order of ``ins``).
    parts : tuple of str
        What ``fcompute`` gives: ``("body",)`` or ``("body", "reset", "update")``.
    binds : dict
        ``Tensor -> polytile.tir.DeclBuffer``: declared layouts (strides, offset factor,
        scope) of the operands; operands without one are compact row-major.
    default_buffer_params : dict
        Keyword arguments of ``decl_buffer`` for operands not in ``binds``.
    emulate : callable or None
        ``emulate(part, views)``: a model of the instruction that the reference
        interpreter runs instead of ``op`` on the numpy views of the regions (output
        last), such as the lane-level model of an AMD MFMA (its operands spread over the
        registers of 64 lanes); None runs ``op``.
    layouts : dict
        ``{operand name: (how the intrinsic reads it, the fix)}``: where an operand's
        region does not match (rank, access, strides), ``tensorize`` says how the
        intrinsic reads that operand and gives the fix as its hint (an instruction with
        several layouts of one operand, such as wgmma's K- or MN-major B).
    """

    name: str
    op: ComputeOp
    fcompute: Callable
    inputs: tuple
    binds: dict = field(default_factory=dict)
    default_buffer_params: dict = field(default_factory=dict)
    parts: tuple = ("body",)
    emulate: Callable | None = None
    async_group: AsyncGroup | None = None
    layouts: dict = field(default_factory=dict)

    @property
    def output(self) -> Tensor:
        return self.op.output(0)

    @property
    def outputs(self) -> tuple:
        """Every output of ``op`` (several for a ``te.extern`` of several dtypes)."""
        return tuple(self.op.output(k) for k in range(self.op.num_outputs))

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.op.body[0], Reduce)

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(op, fcompute: Callable, name: str = "tensor_intrin", binds=None,
                       scalar_params=None, default_buffer_params=None, *,
                       emulate: Callable | None = None,
                       async_group: AsyncGroup | None = None,
                       layouts: dict | None = None) -> TensorIntrin:
    """Declare a tensor intrinsic (TVM v0.19's ``te.decl_tensor_intrin``).

    Parameters
    ----------
    op : ComputeOp
        What one call computes, over placeholders of the operand shapes; e.g. for a gemv
        micro-kernel ``c = te.compute((m,), lambda i: te.sum(a[k] * b[i, k], axis=k))``
        and ``op = c.op``.
    fcompute : callable
        ``fcompute(ins, outs)``: ``ins`` are buffer views of the inputs (in the order
        ``op`` reads them first), ``outs`` of the output; returns the statement of one
        call, or ``(body, reset, update)`` for a reduction (any of them may be None when
        unused).
    name : str
        Registered under this name (a later declaration of the same name replaces it).
    binds : dict, optional
        ``{tensor: polytile.tir.decl_buffer(...)}``: declared strides (``te.var`` for
        strides that take the value of the region's), ``offset_factor``, ``scope``.
    scalar_params : None
        Not supported (TVM's scalar parameters of an intrinsic).
    default_buffer_params : dict, optional
        ``decl_buffer`` keyword arguments for operands not in ``binds``.
    emulate : callable, optional
        A model of the instruction for the reference interpreter (``TensorIntrin.emulate``;
        polytile's own, not TVM's).
    async_group : AsyncGroup, optional
        The ``update`` only issues the work, grouped and waited for by a software
        pipeline (:class:`AsyncGroup`; polytile's own).
    layouts : dict, optional
        ``{operand name: (how the intrinsic reads it, the fix)}`` for the refusals of
        ``tensorize`` (``TensorIntrin.layouts``; polytile's own).

    Raises
    ------
    DefinitionTypeError
        For an ``op`` that is not a single-output compute over placeholders, a
        ``fcompute`` that is not callable, or binds of other tensors.
    """
    if isinstance(op, Tensor):
        op = op.op
    if not isinstance(op, ComputeOp) or op.num_outputs != 1:
        raise DefinitionTypeError(format_error(
            "decl_tensor_intrin", f"op is {type(op).__name__}",
            "the ComputeOp (one output) describing what the intrinsic computes, e.g. c.op"))
    if not callable(fcompute):
        raise DefinitionTypeError(format_error(
            "decl_tensor_intrin", f"fcompute is {type(fcompute).__name__}",
            "a function fcompute(ins, outs) returning the body (or body, reset, update)"))
    if scalar_params:
        raise DefinitionValueError(format_error(
            "decl_tensor_intrin", "scalar_params are not supported",
            "pass scalars as constants inside fcompute"))
    inputs = tuple(op.input_tensors)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise DefinitionTypeError(format_error(
                "decl_tensor_intrin", f"intrinsic {name!r} reads {t.name!r}, which is "
                "computed", "an op that reads placeholders only (the operands)"))
    binds = dict(binds or {})
    known = {id(t) for t in inputs} | {id(op.output(0))}
    for t in binds:
        if not isinstance(t, Tensor) or id(t) not in known:
            raise DefinitionTypeError(format_error(
                "decl_tensor_intrin", f"binds names {getattr(t, 'name', t)!r}, which is not "
                f"an operand of {name!r}",
                f"keys among {[x.name for x in inputs] + [op.output(0).name]}"))
    intrin = TensorIntrin(str(name), op, fcompute, inputs, binds,
                          dict(default_buffer_params or {}), emulate=emulate,
                          async_group=async_group, layouts=dict(layouts or {}))
    from polytile.tir import probe_parts  # tir builds on the loop IR, which builds on te

    object.__setattr__(intrin, "parts", probe_parts(intrin))
    REGISTRY[intrin.name] = intrin
    return intrin


#: ``op.attrs`` key of a ``te.extern`` operation: its TensorIntrin.
EXTERN_KEY = "te.extern"


def extern(shape, inputs, fcompute: Callable, name: str = "extern", dtype=None,
           in_buffers=None, out_buffers=None, tag: str = "", attrs=None) -> Tensor:
    """A tensor computed by external code (TVM's ``te.extern``, one output).

    ``fcompute(ins, outs)`` returns the statement that computes the whole output from the
    whole inputs, built with :mod:`polytile.tir` (``call_extern`` with
    ``ins[k].access_ptr("r")`` and ``outs[0].access_ptr("w")``; the C function reaches the
    module with ``s[T].pragma(axis, "import_c" | "import_llvm", text)`` on any stage). The
    stage has no loops to schedule: lowering runs it as one call, a tensor intrinsic whose
    operands are the whole buffers (compact row-major). polytile cannot see inside: the
    call is taken to read every element of every input, and the reference interpreter
    cannot run it. polytile stores nothing in the output before the call: writing every
    element is the code's job (as in TVM).

    Parameters
    ----------
    shape : tuple of int, or a list of shapes
        The output's shape; a list of several shapes gives one output per shape, returned
        as a list (see :func:`_extern_outputs`).
    inputs : list of Tensor
    fcompute : callable
        ``fcompute(ins, outs) -> statement`` (see above).
    name : str
    dtype : str or list of str, optional
        The output's dtype (default: the first input's); for several outputs one dtype
        for all, or one per output (outputs of different dtypes, such as a float32 and an
        int32 one: :func:`_extern_mixed_outputs`).
    in_buffers, out_buffers : None
        Declared layouts are not supported (buffers are compact).

    Returns
    -------
    Tensor

    Raises
    ------
    DefinitionTypeError, DefinitionValueError
        For a dtype list whose length is not the number of outputs, declared buffers, no
        inputs or a fcompute that is not callable.
    """
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        if len(shape) != 1:
            return _extern_outputs(shape, inputs, fcompute, name, dtype, in_buffers,
                                   out_buffers, tag, attrs)
        shape = shape[0]
    inputs = _checked_extern_args(inputs, fcompute, in_buffers, out_buffers)
    dtype = str(dtype or inputs[0].dtype)
    return _extern_stage(tuple(shape), [dtype], inputs, fcompute, name, tag, attrs)[0]


def _checked_extern_args(inputs, fcompute, in_buffers, out_buffers) -> list:
    """The inputs of a ``te.extern`` as a list, after the checks that every form of it
    makes: compact buffers only, a non-empty list of tensors, a callable ``fcompute``.

    Raises
    ------
    DefinitionValueError
        For declared ``in_buffers``/``out_buffers``.
    DefinitionTypeError
        For inputs that are not tensors, or an ``fcompute`` that is not callable.
    """
    if in_buffers is not None or out_buffers is not None:
        raise DefinitionValueError(format_error(
            "extern", "declared in_buffers/out_buffers", "compact buffers (leave them out)"))
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not inputs or not all(isinstance(t, Tensor) for t in inputs):
        raise DefinitionTypeError(format_error("extern", f"inputs {inputs!r}",
                                               "a non-empty list of tensors"))
    if not callable(fcompute):
        raise DefinitionTypeError(format_error("extern", f"fcompute is "
                                               f"{type(fcompute).__name__}",
                                               "fcompute(ins, outs) returning a statement"))
    return inputs


def _extern_stage(shape: tuple, dtypes: list, inputs: list, fcompute: Callable, name: str,
                  tag: str, attrs) -> list:
    """The stage of a ``te.extern``: one output of ``shape`` per dtype of ``dtypes``, all
    written by one call of ``fcompute`` (``outs[g]`` the view of output ``g``). Its body
    only tells the schedule what is read (every element of every input): a sum times zero,
    or for several outputs one tuple reduction of such sums (the outputs of one stage share
    its axes, TVM's multi-output rule)."""
    from .expr import Cast, Const
    from .reduction import comm_reducer
    from .reduction import sum as te_sum
    from .tensor import compute, reduce_axis

    raxes = [[reduce_axis((0, e), name=f"{t.name}_{q}") for q, e in enumerate(t.shape)]
             for t in inputs]
    axes = [r for rs in raxes for r in rs]

    def zero_sum(dtype):
        terms = [Cast(dtype, t[tuple(r)]) if t.dtype != dtype else t[tuple(r)]
                 for t, r in zip(inputs, raxes)]
        total = terms[0]
        for x in terms[1:]:
            total = total + x
        return total * Const(dtype, 0)

    if len(dtypes) == 1:
        def body(*_):
            return te_sum(zero_sum(dtypes[0]), axis=axes)
    else:
        sums = comm_reducer(lambda x, y: tuple(a + b for a, b in zip(x, y)),
                            lambda *ts: tuple(Const(t, 0) for t in ts), name="extern_reads")

        def body(*_):
            return sums(tuple(zero_sum(d) for d in dtypes), axis=axes)

    outs = compute(shape, body, name=name, tag=tag, attrs=dict(attrs or {}))
    outs = outs if isinstance(outs, list) else [outs]
    op = outs[0].op
    if not op.axis:
        raise DefinitionValueError(format_error("extern", "a 0-d output",
                                                "an output with at least one dimension"))
    intrin = TensorIntrin(name, op, fcompute, tuple(inputs), {}, {})
    from polytile.tir import probe_parts

    try:
        parts = probe_parts(intrin)
    except DefinitionTypeError as e:
        # the probe speaks of tensor intrinsics; a te.extern user wrote neither
        msg = str(e).removeprefix("decl_tensor_intrin: ")
        raise DefinitionTypeError(f"extern: stage {name!r}: {msg}") from None
    if parts != ("body",):
        # None (a forgotten return) used to pass here and fail later at lowering with a
        # tensorize error about reduce axes the user never declared
        got = "nothing (None)" if not parts else f"the parts {list(parts)}"
        raise DefinitionTypeError(format_error(
            "extern", f"fcompute of stage {name!r} returned {got}",
            "fcompute(ins, outs) returning one statement (a call_extern, ib.get())"))
    object.__setattr__(intrin, "parts", parts)
    op.attrs[EXTERN_KEY] = intrin
    return outs


def _extern_outputs(shapes, inputs, fcompute, name, dtype, in_buffers, out_buffers, tag,
                    attrs) -> list:
    """``te.extern`` of several outputs of one shape and dtype (TVM's
    ``test_extern_multi_out`` form): one stage computes them stacked, ``[k, *shape]``, its
    code getting one compact view per output (``outs[j]`` starts at ``j * size``); output
    ``j`` is the compute ``{name}.v{j}`` that reads slice ``j`` (inline it into its
    consumers with ``compute_inline``, or keep it as a copy)."""
    from polytile.tir import BufferView

    from . import symbolic as sym
    from .tensor import compute

    shapes = [tuple(x) for x in shapes]
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    default = ins[0].dtype if ins and isinstance(ins[0], Tensor) else None
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    dtypes = [default if d is None else d for d in dtypes]
    if len(dtypes) != len(shapes):
        raise DefinitionValueError(format_error(
            "extern", f"{name!r}: {len(shapes)} outputs and {len(dtypes)} dtypes",
            "one dtype, or one per output"))
    from . import dtype as dt

    dtypes = [dt.canonical(d) for d in dtypes]
    if len(set(dtypes)) != 1:
        return _extern_mixed_outputs(shapes, dtypes, ins, fcompute, name, in_buffers,
                                     out_buffers, tag, attrs)
    if not all(sym.same_shape(x, shapes[0]) for x in shapes):
        return _extern_flat_outputs(shapes, inputs, fcompute, name, dtypes[0], in_buffers,
                                    out_buffers, tag, attrs)
    k = len(shapes)

    def stacked(ins, outs):
        o = outs[0]
        zeros = (0,) * (len(o.shape) - 1)
        views = [BufferView(o.buffer, o.shape[1:], o.strides[1:],
                            o.offset_of((j, *zeros)), name=f"{name}.v{j}")
                 for j in range(k)]
        return fcompute(ins, views)

    packed = extern((k, *shapes[0]), inputs, stacked, name=name, dtype=dtypes[0],
                    in_buffers=in_buffers, out_buffers=out_buffers, tag=tag, attrs=attrs)
    return [compute(shapes[0], lambda *i, j=j: packed[(j, *i)], name=f"{name}.v{j}")
            for j in range(k)]


def _extern_flat_outputs(shapes, inputs, fcompute, name, dtype, in_buffers, out_buffers,
                         tag, attrs) -> list:
    """``te.extern`` of several outputs of one dtype and different shapes: one stage
    computes them one after another in a flat array of their total size, its code getting
    one compact row-major view per output (``outs[j]`` starts where ``outs[j - 1]`` ends);
    output ``j`` is the compute ``{name}.v{j}`` that reads its part (inline it into its
    consumers with ``compute_inline``, or keep it as a copy). Symbolic extents are allowed
    where the offsets stay affine: in one-dimensional outputs, or in the first axis of an
    output whose other axes are constant.

    Raises
    ------
    DefinitionValueError
        For an output whose size is not affine in the symbolic sizes (two symbolic axes, or
        a symbolic axis after the first).
    """
    from polytile.tir import BufferView

    from .tensor import compute

    strides, offsets, total = _flat_layout(shapes, name)
    def stacked(ins, outs):
        o = outs[0]
        views = [BufferView(o.buffer, shape, st, o.offset_of((off,)), name=f"{name}.v{j}")
                 for j, (shape, st, off) in enumerate(zip(shapes, strides, offsets))]
        return fcompute(ins, views)

    packed = extern((total,), inputs, stacked, name=name, dtype=dtype, in_buffers=in_buffers,
                    out_buffers=out_buffers, tag=tag, attrs=attrs)

    return [compute(shape, _flat_part(packed, offsets[j], strides[j]), name=f"{name}.v{j}")
            for j, shape in enumerate(shapes)]


def _flat_part(packed, offset, strides) -> Callable:
    """The compute body reading an output stored row-major at ``offset`` of ``packed``."""
    def read(*i):
        flat = offset
        for x, st in zip(i, strides):
            flat = flat + x * st if not isinstance(flat, int) or flat else x * st
        return packed[flat]
    return read


def _flat_layout(shapes: list, name: str) -> tuple:
    """Row-major strides of each shape, its offset when stored one after another, and the
    total size: ``(strides, offsets, total)``.

    Raises
    ------
    DefinitionValueError
        For a shape with a symbolic extent after its first axis (offsets not affine).
    """
    from . import symbolic as sym

    sizes, strides = [], []
    for shape in shapes:
        st, size = [], 1
        for q, d in reversed(list(enumerate(shape))):
            st.append(size)
            if not sym.is_static(d) and q != 0:
                raise DefinitionValueError(format_error(
                    "extern", f"{name!r}: output of the shape "
                    f"({', '.join(sym.text(x) for x in shape)}) has the symbolic extent "
                    f"{sym.text(d)} after its first axis",
                    "outputs of different shapes with symbolic extents in their first axis "
                    "only (their offsets in the stacked array must stay affine)",
                    hint="use one te.extern per output"))
            size = sym.mul(size, d)
        strides.append(tuple(reversed(st)))
        sizes.append(size)
    offsets, total = [], 0
    for size in sizes:
        offsets.append(total)
        total = sym.add(total, size)
    return strides, offsets, total


def _extern_mixed_outputs(shapes, dtypes, inputs, fcompute, name, in_buffers, out_buffers,
                          tag, attrs) -> list:
    """``te.extern`` of outputs of several dtypes (a float32 and an int32 output of one C
    function): one stage with one flat output per dtype (``{name}.v{g}`` of the stage
    ``{name}.packed``), the outputs of each dtype stored one after another in it as in
    :func:`_extern_flat_outputs`; the code gets one compact row-major view per output
    (its own dtype, in the order of ``shapes``). The flat outputs share the stage's one
    axis: its extent is the largest total (the sum of the totals where sizes are
    symbolic). Output ``j`` is the compute ``{name}.v{j}`` reading its part.

    Raises
    ------
    DefinitionValueError
        For declared buffers, or an output whose offset is not affine in the symbolic
        sizes (see :func:`_flat_layout`).
    """
    from polytile.tir import BufferView

    from . import symbolic as sym
    from .tensor import compute

    inputs = _checked_extern_args(inputs, fcompute, in_buffers, out_buffers)
    groups = list(dict.fromkeys(dtypes))
    members = [[j for j, d in enumerate(dtypes) if d == g] for g in groups]
    layouts = [_flat_layout([shapes[j] for j in m], name) for m in members]
    totals = [lay[2] for lay in layouts]
    if all(sym.is_static(t) for t in totals):
        extent = max(max(sym.static(t) for t in totals), 1)
    else:
        extent = 0
        for t in totals:
            extent = sym.add(extent, t)
    where = {}     # output j -> (group, strides, offset)
    for g, (m, (st, off, _)) in enumerate(zip(members, layouts)):
        for q, j in enumerate(m):
            where[j] = (g, st[q], off[q])

    def stacked(ins, outs):
        views = [BufferView(outs[g].buffer, shapes[j], st, outs[g].offset_of((off,)),
                            name=f"{name}.v{j}")
                 for j, (g, st, off) in sorted(where.items())]
        return fcompute(ins, views)

    packed = _extern_stage((extent,), groups, list(inputs), stacked, f"{name}.packed", tag,
                           attrs)
    return [compute(shapes[j], _flat_part(packed[where[j][0]], where[j][2], where[j][1]),
                    name=f"{name}.v{j}") for j in range(len(shapes))]
