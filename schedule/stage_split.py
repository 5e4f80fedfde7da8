"""``split`` by factors only known at run time (TVM allows any integer expression):
the part of :class:`~polytile.schedule.stage.Stage` that builds those relations.

* ``factor=`` an integer expression of size parameters or scalar arguments, or ``nparts=``
  a ``te.var`` (or a constant ``nparts`` of a symbolic extent on a spatial axis): a
  :class:`~.relations.Split` with ``sym`` set, strip-mined after isl's code generation
  (:func:`~.relations.symbolic_split`, ``model._strip_leaves``, ``astgen._strip_mine``);
* a constant ``nparts=`` of a symbolic *reduction* extent: the affine, cyclic
  :class:`~.relations.Cyclic` split.
"""

from __future__ import annotations

from polytile.errors import fail
from polytile.te import dtype as dt
from polytile.te import symbolic as sym
from polytile.te.expr import IterVar, Reduce, TensorRead, TupleCommReducer, Var, binary
from polytile.te.visitor import collect

from .relations import Cyclic, Split, symbolic_fuse, symbolic_split


class SymbolicSplitMixin:
    """Symbolic ``split`` factors of a stage (see the module docstring)."""

    def _split_symbolic(self, parent: IterVar, which: str, val, ext):
        """``split`` by a factor only known at run time (see :func:`symbolic_split`):
        ``factor=`` an integer expression of size parameters or scalar arguments, or
        ``nparts=`` of a symbolic extent (``factor = ceil(extent / nparts)``)."""
        body = self.op.body[0] if getattr(self.op, "body", ()) else None
        if (which == "nparts" and isinstance(val, int) and parent.iter_type == "reduce"
                and isinstance(body, Reduce)
                and not isinstance(body.combiner, TupleCommReducer)):
            # a tuple reducer keeps the block split: its ties follow the axis order
            return self._split_cyclic(parent, val, ext)
        e = sym.as_expr(val)
        bad = [v.name for v in collect(e, Var) if v.is_axis]
        if not dt.is_int(e.dtype) or bad or any(isinstance(r, TensorRead)
                                                 for r in collect(e, TensorRead)):
            fail("split", f"{which}={val} for iter_var {parent.name!r} of stage "
                 f"{self.name!r}", "an int or an integer expression of size parameters and "
                 "scalar arguments (no loop variables, no tensor reads)")
        if which == "factor":
            f = e
        else:   # ceil(extent / nparts), 1 for an empty loop (as for constant nparts)
            f = binary("max", binary("floordiv", binary("add", sym.as_expr(ext),
                                                        binary("sub", e, 1)), e), 1)
        outer = self._new_iv(f"{parent.name}.outer",
                             binary("floordiv", binary("add", sym.as_expr(ext),
                                                       binary("sub", f, 1)), f), parent)
        inner = self._new_iv(f"{parent.name}.inner", f, parent)
        self.relations.append(Split(parent, outer, inner, 0, 0, sym=f, given=e))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._move_attach(parent, inner)
        self._record("split", parent, **{which: val})
        return outer, inner

    def _split_cyclic(self, parent: IterVar, parts: int, ext):
        """``split(k, nparts=parts)`` of a reduction axis of symbolic extent: the cyclic
        split ``k = inner * parts + outer`` (see :class:`~.relations.Cyclic`)."""
        outer = self._new_iv(f"{parent.name}.outer", parts, parent)
        inner = self._new_iv(f"{parent.name}.inner", sym.ceildiv(ext, parts), parent)
        self.relations.append(Cyclic(parent, outer, inner, parts))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._move_attach(parent, inner)
        self._record("split", parent, nparts=parts)
        return outer, inner

    def _fused_symbolic(self, iv: IterVar) -> bool:
        """True when ``iv`` is a fused loop of symbolic extent (``relations.symbolic_fuse``):
        its split by a constant factor is kept for TVM's GPU injective schedule
        (``schedule.injective``) and refused at lowering otherwise."""
        return any(symbolic_fuse(rel) and iv is rel.fused for rel in self.relations)

    def _check_not_symbolic_split(self, primitive: str, iv: IterVar) -> None:
        for rel in self.relations:
            if symbolic_fuse(rel) and iv is rel.fused:
                fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} fuses a loop "
                     f"of symbolic extent {rel.inner.dom.extent}", "split, fuse or transform "
                     "loops of constant extent (the fused index is not affine: the loops are "
                     "coalesced after isl's code generation)", hint="split the inner axis "
                     "by a constant factor and fuse that part")
            if symbolic_split(rel) and iv in (rel.outer, rel.inner):
                fail(primitive, f"iter_var {iv.name!r} of stage {self.name!r} comes from a "
                     f"split by the symbolic factor {rel.sym}", "split, fuse or transform "
                     "loops of constant extent (the two loops of a symbolic split are "
                     "strip-mined after isl's code generation and stay as they are)")
