"""A kernel parameter that is a TMA tensor map (``Stage.pipeline(..., tma=True)``).

The C printer gives a kernel one :class:`TensorMapParam` per distinct (argument, box,
swizzle) that its ``tma.load_2d`` calls read (:mod:`polytile.schedule.passes.tma_copy`),
printed as ``const __grid_constant__ PtTensorMap``; the module encodes it on the host at
each call from the argument's device pointer (``DeviceAPI.tensor_map``, cached per
pointer) and passes the 128 bytes by value.
"""

from __future__ import annotations

from dataclasses import dataclass

from polytile.schedule.loop_ir import Buffer


@dataclass(frozen=True, eq=False)
class TensorMapParam:
    """The tensor map of the row-major ``source[rows, cols]`` (a parameter buffer of the
    function) read in boxes of ``box_rows x box_cols`` elements written into shared
    memory swizzled ``swizzle``; ``name`` is its C name."""

    source: Buffer
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle: str
    name: str

    @property
    def dtype(self) -> str:
        """The element type (the source's)."""
        return self.source.dtype

    def key(self) -> tuple:
        """What makes two maps of one kernel the same."""
        return (id(self.source), self.rows, self.cols, self.box_rows, self.box_cols,
                self.swizzle)

    def to_json(self, source_ref) -> dict:
        """Its export metadata, the source named by ``source_ref``."""
        return {"source": source_ref, "rows": self.rows, "cols": self.cols,
                "box_rows": self.box_rows, "box_cols": self.box_cols,
                "swizzle": self.swizzle, "name": self.name}


__all__ = ["TensorMapParam"]
