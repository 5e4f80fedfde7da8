"""Iteration-variable relations and schedule steps: the data a schedule is made of.

A stage's loops (its *leaf* iteration variables) derive from the compute's axes through
relations, each the definition of new variables by an index equation:

* ``Split(parent, outer, inner, factor)``: ``parent = min(parent) + outer * factor + inner``
  with ``0 <= inner < factor``.
* ``Fuse(outer, inner, fused)``: ``fused = outer * extent(inner) + inner``.
* ``Singleton(iv)``: ``iv = 0``, a loop of one iteration derived from no axis (what
  ``fuse()`` of no axes makes, TVM's ``Singleton``).
* ``Transform(parents, children, index_map)``: ``children = index_map(parents)``, the
  loops over the new indices of ``transform_layout`` (TVM's ``Transform``).

A schedule's *trace* is the list of :class:`Step` records, one per primitive call; replaying
it on a fresh schedule of the same computation rebuilds the same schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytile.te.expr import IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """``factor`` as given, or ``nparts`` (then ``factor = ceil(extent / nparts)`` is
    computed from the parent's extent when the loops are built: for an attached stage
    that extent is the inferred region's, as in TVM)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int
    nparts: int = 0
    #: the factor as an integer expression of size parameters or scalar arguments when it
    #: is symbolic (``factor`` is then 0): see :func:`symbolic_split`
    sym: object = None
    #: the symbolic ``factor=`` or ``nparts=`` as given (checked ``>= 1`` at each call)
    given: object = None


@dataclass(frozen=True, slots=True, eq=False)
class Cyclic:
    """``parent = inner * parts + outer`` (``0 <= outer < parts``): how ``split(k,
    nparts=parts)`` (a constant) splits a *reduction* axis of symbolic extent. The block
    split ``k = outer * ceil(E / parts) + inner`` would be non-affine; the cyclic one runs
    the same iterations, with the reduction summed in another order (as any reorder of
    reduction loops; ``outer`` has the constant extent ``parts``, so it can be bound to
    ``threadIdx``: TVM's cross-thread reduction with ``nparts=num_threads``)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    parts: int


def symbolic_split(rel) -> bool:
    """Whether ``rel`` is a split by a symbolic factor (``split(x, factor=n // 4)``, or
    ``nparts=`` of a symbolic extent). isl cannot represent ``x -> (floor(x/f), x mod f)``
    for a parameter ``f``: the two loops are one loop over ``x`` for isl (legality, bounds,
    AST generation) and are strip-mined after AST generation (``astgen.convert_for``)."""
    return isinstance(rel, Split) and rel.sym is not None


@dataclass(frozen=True, slots=True, eq=False)
class Fuse:
    """``fused = outer * E + inner`` (``E`` the inner extent). With a symbolic ``E``
    (``sym=True``) the map is not affine: isl sees the two loops, and the code generator
    coalesces them into the fused loop (:func:`symbolic_fuse`)."""

    outer: IterVar
    inner: IterVar
    fused: IterVar
    sym: bool = False


def symbolic_fuse(rel) -> bool:
    """Whether ``rel`` fuses an inner loop of symbolic extent: for isl the two loops stay
    (``model._strip_leaves``); the annotation of the fused loop applies to both for
    legality, and ``astgen`` emits one loop over ``outer * E + inner`` where the generated
    nest is perfect (else the two loops, the outer one with the fused loop's kind: the
    same iterations in the same order)."""
    return isinstance(rel, Fuse) and rel.sym


@dataclass(frozen=True, slots=True, eq=False)
class Singleton:
    iv: IterVar


@dataclass(frozen=True, slots=True, eq=False)
class Transform:
    parents: tuple
    children: tuple
    index_map: object    # polytile.schedule.layout.IndexMap


@dataclass(frozen=True, slots=True)
class Step:
    """One primitive call: ``primitive`` on stage ``stage`` with ``args``.

    Iteration variables are recorded as ``("iv", index, name)`` where ``index`` is the
    position in the stage's ``all_iter_vars`` (stable under replay); stages as
    ``("stage", name)``; everything else as plain Python values.
    """

    primitive: str
    stage: str
    args: tuple = ()
    kwargs: tuple = ()

    def __str__(self) -> str:
        def fmt(a):
            if isinstance(a, tuple) and a and a[0] == "iv":
                return a[2]
            if isinstance(a, tuple) and a and a[0] == "stage":
                return f"s[{a[1]}]"
            return repr(a)

        parts = [fmt(a) for a in self.args] + [f"{k}={fmt(v)}" for k, v in self.kwargs]
        return f"s[{self.stage}].{self.primitive}({', '.join(parts)})"

    def to_json(self) -> list:
        """A JSON-serialisable form (used by tuning records)."""
        return [self.primitive, self.stage, _jsonable(self.args), _jsonable(self.kwargs)]

    @staticmethod
    def from_json(data) -> Step:
        prim, stage, args, kwargs = data
        return Step(prim, stage, _tuplify(args), _tuplify(kwargs))


def _jsonable(x):
    if isinstance(x, tuple):
        return [_jsonable(v) for v in x]
    return x


def _tuplify(x):
    if isinstance(x, list):
        return tuple(_tuplify(v) for v in x)
    return x
