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
    """

    name: str
    op: ComputeOp
    fcompute: Callable
    inputs: tuple
    binds: dict = field(default_factory=dict)
    default_buffer_params: dict = field(default_factory=dict)
    parts: tuple = ("body",)

    @property
    def output(self) -> Tensor:
        return self.op.output(0)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.op.body[0], Reduce)

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(op, fcompute: Callable, name: str = "tensor_intrin", binds=None,
                       scalar_params=None, default_buffer_params=None) -> TensorIntrin:
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
                          dict(default_buffer_params or {}))
    from polytile.tir import probe_parts  # tir builds on the loop IR, which builds on te

    object.__setattr__(intrin, "parts", probe_parts(intrin))
    REGISTRY[intrin.name] = intrin
    return intrin
