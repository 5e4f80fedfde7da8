"""Layout transformations (TVM's ``Stage.transform_layout``): the index maps of a buffer.

An :class:`IndexMap` sends the index of an element (``N`` integers) to its position in
the transformed buffer: ``lambda i, j: [j, i]`` transposes, ``lambda i: [i // 4, i % 4]``
splits. It must be quasi-affine (``+``, ``-``, multiplication by constants, ``//`` and
``%`` by positive constants) and injective on the tensor's elements (checked with isl);
every new index ranges from 0 and the new shape is the bounding box of the image, so a
non-divisible split pads (``lambda i: [i // 4, i % 4]`` of 10 elements is a 3x4 buffer whose
last two slots hold nothing).

Several maps apply in order. The *model* stores every access to the tensor at
``f(index)`` (its access relations composed with the maps, so isl simplifies the
physical indices against the loops), buffers and function arguments take the new shape,
and a compute stage's loops run over the new indices in row-major order (the
:class:`~polytile.schedule.relations.Transform` relation).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import islpy as isl

from polytile.errors import fail
from polytile.te import AXIS_SEPARATOR
from polytile.te.expr import Var, convert
from polytile.te.visitor import substitute

from . import isl_util as iu



@dataclass(frozen=True, eq=False)
class IndexMap:
    """``vars -> exprs`` on the elements ``domain`` (an isl set over ``[x0, ...]``);
    ``shape`` is the new buffer shape and ``image`` the isl set of positions used."""

    vars: tuple
    exprs: tuple
    affs: tuple           # isl syntax of each expr, over x0, x1, ...
    domain: isl.Set
    image: isl.Set
    shape: tuple

    def __repr__(self) -> str:
        args = ", ".join(v.name for v in self.vars)
        return f"IndexMap(({args}) -> [{', '.join(map(str, self.exprs))}])"

    def isl_map(self) -> isl.Map:
        xs = ", ".join(f"x{k}" for k in range(len(self.vars)))
        return iu.Map(f"{{ [{xs}] -> [{', '.join(self.affs)}] }}")

    def __call__(self, *indices):
        """The new indices of ``indices`` (expressions): a replayable mapping function."""
        return [substitute(e, dict(zip(self.vars, map(convert, indices))))
                for e in self.exprs]


def _call(fn, xs: list):
    """Call a mapping function the way TVM's ``IndexMap.from_func`` does: keyword-only
    parameters (``lambda *idx, n: ...``) take the last indices by name."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn(*xs)
    kw = [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
    if not kw:
        return fn(*xs)
    head = xs[:len(xs) - len(kw)]
    return fn(*head, **dict(zip(kw, xs[len(head):])))


def make_index_map(stage_name: str, fn, domain: isl.Set, names: list) -> IndexMap:
    """The :class:`IndexMap` of mapping function ``fn`` on the elements ``domain`` (a set
    over ``[x0, ...]``), its arguments named ``names``.

    Raises
    ------
    ScheduleError
        For a result that is not a list of integer expressions, an axis separator, a
        non-affine index, a map that sends two elements to one place, or an index that
        can be negative.
    """
    who = "transform_layout"
    if not callable(fn):
        fail(who, f"the mapping of stage {stage_name!r} is {fn!r}",
             "a function of the old indices returning the new ones, e.g. lambda i, j: [j, i]")
    xs = [Var("int32", n) for n in names]
    try:
        out = _call(fn, xs)
    except TypeError as exc:
        fail(who, f"the mapping of stage {stage_name!r} cannot take its {len(xs)} indices: "
             f"{exc}", f"a function of {len(xs)} indices")
    if not isinstance(out, (list, tuple)):
        out = [out]
    if any(x is AXIS_SEPARATOR for x in out):
        fail(who, f"the mapping of stage {stage_name!r} uses te.AXIS_SEPARATOR",
             "one flat list of new indices (polytile buffers have one physical dimension; "
             "several are not supported)")
    exprs, affs = [], []
    names_of = {v: f"x{k}" for k, v in enumerate(xs)}
    for k, x in enumerate(out):
        try:
            e = convert(x, "int32")
        except TypeError:
            e = None
        a = iu.affine_str(e, names_of) if e is not None and e.dtype.startswith(
            ("int", "uint")) else None
        if a is None:
            fail(who, f"new index {k} ({x}) of stage {stage_name!r} is not a quasi-affine "
                 "integer expression of the old indices", "+, -, * by a constant, // and % "
                 "by a positive constant (TVM requires an affine map too)")
        exprs.append(e)
        affs.append(a)
    xs_s = ", ".join(names_of[v] for v in xs)
    m = iu.Map(f"{{ [{xs_s}] -> [{', '.join(affs)}] }}").intersect_domain(domain)
    if not m.is_injective():
        same = m.apply_range(m.reverse()).subtract(isl.Map.identity(
            m.get_space().domain().map_from_set())).wrap().sample_point()
        n = len(xs)
        c = iu.point_coords(same, 2 * n)
        fail(who, f"the mapping of stage {stage_name!r} sends elements {tuple(c[:n])} and "
             f"{tuple(c[n:])} to one place", "an injective (invertible) map")
    image = m.range()
    shape = []
    for q in range(len(affs)):
        if image.is_empty():
            shape.append(0)
            continue
        lo, hi = image.dim_min_val(q).to_python(), image.dim_max_val(q).to_python()
        if lo < 0:
            fail(who, f"new index {q} ({exprs[q]}) of stage {stage_name!r} reaches {lo}",
                 "new indices from 0 (add an offset to the mapping)")
        shape.append(hi + 1)
    return IndexMap(tuple(xs), tuple(exprs), tuple(affs), domain, image, tuple(shape))


def physical_shape(layouts: list, shape: tuple) -> tuple:
    """The buffer shape after ``layouts`` (``shape`` itself without any)."""
    return tuple(layouts[-1].shape) if layouts else tuple(shape)


def compose_access(layouts: list, acc: isl.PwMultiAff) -> isl.PwMultiAff:
    """Access ``acc`` (statement -> tensor index) followed by every map of ``layouts``:
    statement -> position in the transformed buffer (named like ``acc``'s range)."""
    if not layouts:
        return acc
    name = acc.get_tuple_name(isl.dim_type.out)
    out = acc
    for lm in layouts:
        f = isl.PwMultiAff.from_map(lm.isl_map())
        out = f.pullback_pw_multi_aff(out.reset_tuple_id(isl.dim_type.out))
    return iu.name_range(out, name) if name else out


def apply_indices(layouts: list, indices: tuple) -> tuple:
    """The new indices (``int64`` loop-IR expressions) of the old ``indices`` (``int64``)
    under ``layouts``, written by isl from each map (exact floor division and modulo)."""
    idx = tuple(indices)
    for lm in layouts:
        xs = [f"x{k}" for k in range(len(lm.vars))]
        build = isl.AstBuild.from_context(iu.Set(f"[{', '.join(xs)}] -> {{ : }}"))
        env = dict(zip(xs, idx))
        out = []
        for a in lm.affs:
            pa = isl.PwAff(f"[{', '.join(xs)}] -> {{ [({a})] }}")
            out.append(iu.ast_expr(build.expr_from_pw_aff(pa), env.__getitem__))
        idx = tuple(out)
    return idx


def first_domain(shape: tuple) -> isl.Set:
    """The elements of a tensor of ``shape``, over ``[x0, ...]``."""
    xs = [f"x{k}" for k in range(len(shape))]
    return iu.Set(f"{{ [{', '.join(xs)}] : {iu.box_str(xs, [(0, s) for s in shape])} }}")


__all__ = ["IndexMap", "apply_indices", "compose_access", "first_domain",
           "make_index_map", "physical_shape"]
