"""Tensor expressions: declare *what* to compute.

``placeholder`` declares inputs, ``compute`` defines tensors elementwise, ``reduce_axis``
and ``sum``/``max``/``min``/``comm_reducer`` express reductions. The schedule API
(``create_schedule``, ``thread_axis``) is re-exported here under TVM's names.
"""

from __future__ import annotations

from .expr import (Call, Cast, Cmp, CommReducer, Const, Expr, IterVar, Range, Reduce,
                   Select, TensorRead, TupleCommReducer, Var, const)
from .expr import logical_and as all
from .expr import logical_or as any
from .expr import select as if_then_else
from .scalar_math import (abs, acos, asin, atan, atan2, ceil, clz, copysign, cos, cosh, erf, exp, exp2,
                          expm1, fast_erf, fast_exp, fast_tanh, floor, floordiv, floormod, fmod,
                          hypot, isfinite, isinf, isnan, log, log1p, log2, log10, nearbyint, pow,
                          popcount, power, round, rsqrt, sigmoid, sin, sinh, sqrt, tan, tanh, trunc,
                          truncdiv, truncmod)

indexdiv = floordiv   # TVM's index arithmetic: floor semantics
indexmod = floormod
from .reduction import Reducer, comm_reducer, max, max_value, min, min_value, sum
from .tensor import (ComputeOp, Operation, PlaceholderOp, Tensor, TensorSlice, compute,
                     placeholder)
from .tensor import reduce_axis, size_var, var
from .tensor_intrin import AsyncGroup, TensorIntrin, decl_tensor_intrin, extern
from .scan import ScanOp, scan
from .tag import tag_scope


class _AxisSeparator:
    """TVM's ``te.AXIS_SEPARATOR`` in a ``transform_layout`` mapping (several physical
    buffer dimensions); polytile buffers are flat and refuse it with a clear error."""

    def __repr__(self) -> str:
        return "te.AXIS_SEPARATOR"


AXIS_SEPARATOR = _AxisSeparator()


# create_schedule and thread_axis live in polytile.schedule, which is built on te (it
# imports te's modules): te reaches it at call time, under TVM's names.
def create_schedule(ops):
    """Create a schedule for ``ops`` (an operation or list of them); see
    :func:`polytile.schedule.create_schedule`."""
    from polytile.schedule import create_schedule as _cs

    return _cs(ops)


def thread_axis(dom=None, tag: str = "", name: str = ""):
    """A GPU thread axis; see :func:`polytile.schedule.thread_axis`."""
    from polytile.schedule import thread_axis as _ta

    return _ta(dom, tag, name)


def __getattr__(name: str):
    # ``te.schedule`` (TVM's ``tvm.te.schedule``: Schedule, Stage, Split, Fuse, Singleton,
    # IterVar kinds): the schedule package, imported on first use (it imports te)
    if name == "schedule":
        import polytile.schedule as _schedule

        return _schedule
    why = _NOT_PORTED.get(name)
    if why is not None:
        raise AttributeError(f"te.{name}: TVM's {why}, which polytile does not have; "
                             "polytile runs TE schedules (te.create_schedule, "
                             "polytile.lower/build)")
    raise AttributeError(f"module 'polytile.te' has no attribute {name!r}")


#: TVM v0.19 ``te`` names that belong to other parts of TVM (TensorIR, hybrid script,
#: autodiff): an AttributeError that says so
_NOT_PORTED = {
    "create_prim_func": "conversion of TE to TensorIR (tvm.tir.Schedule)",
    "extern_primfunc": "TE stage from a TensorIR PrimFunc",
    "hybrid": "hybrid script (Python-syntax loop programs)",
    "gradient": "reverse-mode automatic differentiation of TE",
    "SpecializedCondition": "specialisation of TE schedules by conditions (topi)",
}


__all__ = [
    "AXIS_SEPARATOR", "Call", "Cast", "Cmp", "CommReducer", "ComputeOp", "Const", "Expr",
    "IterVar", "acos",
    "asin", "atan", "atan2", "copysign", "cosh", "expm1", "hypot", "indexdiv", "indexmod",
    "isfinite", "isinf", "log1p", "nearbyint", "sinh", "tan", "clz", "popcount",
    "Operation", "PlaceholderOp", "Range", "Reduce", "Reducer", "ScanOp", "Select", "Tensor",
    "TensorSlice", "TupleCommReducer", "scan",
    "TensorRead", "Var", "abs", "all", "any", "ceil", "comm_reducer", "compute", "const",
    "cos", "create_schedule", "erf", "exp", "exp2", "fast_erf", "fast_exp", "fast_tanh", "floor", "floordiv", "floormod", "fmod",
    "if_then_else", "isnan", "log", "log2", "log10", "max", "max_value", "min", "min_value",
    "placeholder", "pow", "power", "reduce_axis", "round", "rsqrt", "sigmoid", "sin", "sqrt",
    "size_var", "sum", "tanh", "thread_axis", "trunc", "truncdiv", "truncmod", "var",
    "AsyncGroup", "TensorIntrin", "decl_tensor_intrin", "extern", "tag_scope",
]
