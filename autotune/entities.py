"""Knob entities: the value of one knob in one config, and how it applies to a schedule.

``SplitEntity`` (split sizes), ``ReorderEntity`` (a permutation), ``AnnotateEntity``
(annotations per axis), ``OtherOptionEntity`` (any other value). Each has ``to_json()``
(what records store) and, except the last, ``apply(s, op, axes...)`` (AutoTVM's names).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


class SplitEntity:
    """Sizes of one split: ``[-1, f1, ..., fn]`` (outermost first).

    ``apply(s, op, axis)`` splits ``axis`` of stage ``s[op]`` into ``n + 1`` loops, outermost
    first, by repeated ``split(factor=f1 * ... * fn)``, ``split(factor=f2 * ... * fn)``...
    and returns them.
    """

    __slots__ = ("size",)

    def __init__(self, size: Sequence[int]):
        self.size = list(size)

    def apply(self, sch, op, axis) -> list:
        stage = sch[op]
        out = []
        for k in range(1, len(self.size)):
            outer, axis = stage.split(axis, factor=math.prod(self.size[k:]))
            out.append(outer)
        return out + [axis]

    def to_json(self) -> list:
        return list(self.size)

    def __eq__(self, other) -> bool:
        return isinstance(other, SplitEntity) and other.size == self.size

    def __hash__(self) -> int:
        return hash(tuple(self.size))

    def __repr__(self) -> str:
        return str(self.size)


class ReorderEntity:
    """A permutation: ``apply(s, op, axes)`` reorders ``axes`` into
    ``[axes[p] for p in perm]`` and returns that list."""

    __slots__ = ("perm",)

    def __init__(self, perm: Sequence[int]):
        self.perm = list(perm)

    def apply(self, sch, op, axes) -> list:
        ordered = [axes[p] for p in self.perm]
        if len(ordered) > 1 and self.perm != sorted(self.perm):
            sch[op].reorder(*ordered)
        return ordered

    def to_json(self) -> list:
        return list(self.perm)

    def __eq__(self, other) -> bool:
        return isinstance(other, ReorderEntity) and other.perm == self.perm

    def __hash__(self) -> int:
        return hash(tuple(self.perm))

    def __repr__(self) -> str:
        return str(self.perm)


ANNOTATIONS = ("none", "unroll", "vec")


class AnnotateEntity:
    """One annotation per axis, from ``"none"``, ``"unroll"``, ``"vec"``.

    ``apply(s, op, axes, axis_lens=None, max_unroll=None)`` unrolls or vectorizes each axis;
    an unroll of an axis longer than ``max_unroll`` (given ``axis_lens``) is skipped.
    """

    __slots__ = ("anns",)

    def __init__(self, anns: Sequence[str]):
        self.anns = list(anns)

    def apply(self, sch, op, axes, axis_lens=None, max_unroll=None) -> None:
        stage = sch[op]
        for k, (ax, ann) in enumerate(zip(axes, self.anns)):
            if ann == "unroll":
                if max_unroll is not None and axis_lens is not None and \
                        axis_lens[k] > max_unroll:
                    continue
                stage.unroll(ax)
            elif ann == "vec":
                stage.vectorize(ax)

    def to_json(self) -> list:
        return list(self.anns)

    def __eq__(self, other) -> bool:
        return isinstance(other, AnnotateEntity) and other.anns == self.anns

    def __hash__(self) -> int:
        return hash(tuple(self.anns))

    def __repr__(self) -> str:
        return str(self.anns)


class OtherOptionEntity:
    """The value of a plain knob: ``cfg["name"].val``."""

    __slots__ = ("val",)

    def __init__(self, val):
        self.val = val

    def to_json(self):
        return self.val

    def __eq__(self, other) -> bool:
        return isinstance(other, OtherOptionEntity) and other.val == self.val

    def __hash__(self) -> int:
        return hash(repr(self.val))

    def __repr__(self) -> str:
        return repr(self.val)
