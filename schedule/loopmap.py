"""Loop maps: the affine value of each loop of a stage, and the ranges of its loops.

A stage's loops derive from its axes through split (``x -> (floor(x/f), x mod f)``),
fuse (``(a, b) -> a*E_b + b``) and singleton (``-> 0``); ``leaf_affines`` writes each
loop's value as a quasi-affine expression of the axes in isl syntax, ``iter_ranges`` each
loop's range, and ``padded_box`` the points the full boxes of the loops cover (the
inverse map applied to the loop box), which GPU kernels iterate over.
"""

from __future__ import annotations

import islpy as isl

from polytile.errors import fail
from polytile.te import symbolic as sym

from . import isl_util as iu
from .relations import (Cyclic, Fuse, Singleton, Split, Transform, symbolic_fuse,
                        symbolic_split)
from .stage import Stage


def iter_ranges(stage: Stage, root: dict) -> dict:
    """(min, extent) of every iteration variable, from the root axes' ranges ``root``:
    split gives ``ceil(E/f)`` and ``f``, fuse the product; derived variables start at 0."""
    rng = dict(root)
    for rel in stage.relations:
        if symbolic_split(rel):   # strip-mined after AST generation: never seen by isl
            rng[rel.outer] = (0, rel.outer.dom.extent)
            rng[rel.inner] = (0, rel.sym)
        elif isinstance(rel, Cyclic):
            rng[rel.outer] = (0, rel.parts)
            rng[rel.inner] = (0, sym.ceildiv(rng[rel.parent][1], rel.parts))
        elif isinstance(rel, Split):
            e = rng[rel.parent][1]
            if rel.nparts:
                if not sym.is_static(e):
                    fail("split", f"nparts={rel.nparts} of iter_var {rel.parent.name!r} of "
                         f"stage {stage.name!r}, whose extent {sym.text(e)} is symbolic",
                         "a constant extent for nparts= (the factor would be symbolic)",
                         hint="split with factor= instead")
                e = sym.static(e)
            f = max(1, -(-e // rel.nparts)) if rel.nparts else rel.factor
            rng[rel.outer] = (0, sym.ceildiv(e, f))
            rng[rel.inner] = (0, f)
        elif symbolic_fuse(rel):   # coalesced after AST generation: never seen by isl
            rng[rel.fused] = (0, rel.fused.dom.extent)
        elif isinstance(rel, Fuse):
            if not sym.is_static(rng[rel.inner][1]):
                fail("fuse", f"inner iter_var {rel.inner.name!r} of stage {stage.name!r} has "
                     f"the symbolic extent {sym.text(rng[rel.inner][1])}", "a constant inner "
                     "extent (the fused index outer*extent + inner must be affine)",
                     hint="split the inner axis by a constant factor and fuse that")
            rng[rel.fused] = (0, sym.mul(rng[rel.outer][1], rng[rel.inner][1]))
        elif isinstance(rel, Singleton):
            rng[rel.iv] = (0, 1)
        elif isinstance(rel, Transform):
            for c, n in zip(rel.children, rel.index_map.shape):
                rng[c] = (0, n)
    return rng


def _factor(rel: Split, ranges: dict) -> int:
    return ranges[rel.inner][1]


def leaf_affines(stage: Stage, names: dict, ranges: dict) -> dict:
    """Affine value (isl syntax) of every iteration variable of ``stage`` in terms of the
    root axes ``names`` (``{IterVar: isl name}``), following split and fuse."""
    aff = dict(names)
    for rel in stage.relations:
        if symbolic_split(rel) or symbolic_fuse(rel):
            continue   # its loops are one loop over the parent (two loops) for isl
        if isinstance(rel, Cyclic):
            lo = ranges[rel.parent][0]
            base = f"({aff[rel.parent]} - {iu.num(lo)})" if sym.static(lo) != 0 else \
                aff[rel.parent]
            aff[rel.outer] = f"(({base}) mod {rel.parts})"
            aff[rel.inner] = f"floor(({base})/{rel.parts})"
        elif isinstance(rel, Split):
            lo = ranges[rel.parent][0]
            base = f"({aff[rel.parent]} - {iu.num(lo)})" if sym.static(lo) != 0 else \
                aff[rel.parent]
            f = _factor(rel, ranges)
            aff[rel.outer] = f"floor(({base})/{f})"
            aff[rel.inner] = f"(({base}) mod {f})"
        elif isinstance(rel, Fuse):
            lo_o, lo_i = ranges[rel.outer][0], ranges[rel.inner][0]
            ext = ranges[rel.inner][1]
            aff[rel.fused] = (f"({iu.num(ext)} * ({aff[rel.outer]} - {iu.num(lo_o)}) + "
                              f"({aff[rel.inner]} - {iu.num(lo_i)}))")
        elif isinstance(rel, Singleton):
            aff[rel.iv] = "0"
        elif isinstance(rel, Transform):
            names_of = {v: f"({aff[p]} - {iu.num(ranges[p][0])})"
                        if sym.static(ranges[p][0]) != 0 else aff[p]
                        for v, p in zip(rel.index_map.vars, rel.parents)}
            for c, e in zip(rel.children, rel.index_map.exprs):
                aff[c] = iu.affine_str(e, names_of)
    return aff


def consumed_by(stage: Stage) -> dict:
    """For each iteration variable that is no loop any more, the relation that replaced
    it (the split of a parent, the fuse of an outer or inner variable)."""
    made_by: dict = {}
    for rel in stage.relations:
        if isinstance(rel, (Split, Cyclic)):
            made_by[rel.parent] = rel
        elif isinstance(rel, Fuse):
            made_by[rel.outer] = made_by[rel.inner] = rel
        elif isinstance(rel, Transform):
            for p in rel.parents:
                made_by[p] = rel
    return made_by


def padded_box(stage: Stage, roots: list, leaves: list, ranges: dict) -> isl.Set:
    """The points of the root axes ``roots`` that the full boxes of the loops ``leaves``
    of ``stage`` cover (the image of the loop box under the inverse loop map), given the
    ``ranges`` of every iteration variable."""
    if any(isinstance(rel, Transform) for rel in stage.relations):
        return _preimage_box(stage, roots, leaves, ranges)
    lname = {iv: f"l{k}" for k, iv in enumerate(leaves)}
    made_by = consumed_by(stage)

    def expr(iv) -> str:
        if iv in lname:
            return lname[iv]
        rel = made_by[iv]
        if isinstance(rel, Cyclic):
            return (f"({expr(rel.inner)} * {rel.parts} + {expr(rel.outer)} + "
                    f"{iu.num(ranges[iv][0])})")
        if isinstance(rel, Split):
            f = _factor(rel, ranges)
            return f"({expr(rel.outer)} * {f} + {expr(rel.inner)} + {iu.num(ranges[iv][0])})"
        e_in = ranges[rel.inner][1]
        if iv is rel.outer:
            return f"(floor(({expr(rel.fused)})/{e_in}) + {iu.num(ranges[iv][0])})"
        return f"((({expr(rel.fused)}) mod {e_in}) + {iu.num(ranges[iv][0])})"

    box = iu.box_str([lname[iv] for iv in leaves], [ranges[iv] for iv in leaves])
    out = ", ".join(expr(iv) for iv in roots)
    m = iu.Map(f"{{ [{', '.join(lname[iv] for iv in leaves)}] -> [{out}] : {box} }}")
    return m.range()


def _preimage_box(stage: Stage, roots: list, leaves: list, ranges: dict) -> isl.Set:
    """:func:`padded_box` for loops with a :class:`Transform` (no inverse written out):
    the points whose loop values lie in the loop box, by isl's preimage."""
    names = {iv: f"r{k}" for k, iv in enumerate(roots)}
    aff = leaf_affines(stage, names, ranges)
    box = iu.box_str([f"l{k}" for k in range(len(leaves))], [ranges[iv] for iv in leaves])
    f = iu.Map(f"{{ [{', '.join(names.values())}] -> "
                f"[{', '.join(aff[iv] for iv in leaves)}] }}")
    loops = iu.Set(f"{{ [{', '.join(f'l{k}' for k in range(len(leaves)))}] : {box} }}")
    return f.intersect_range(loops).domain()
