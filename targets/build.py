"""``build``: compile a schedule or a lowered function for a target."""

from __future__ import annotations

from polytile.errors import TargetError, format_error
from polytile.schedule.loop_ir import PrimFunc

from .target import Target


def build(sch_or_func, args=None, target: str | Target = "llvm", name: str = "main"):
    """Compile ``sch_or_func`` into a callable module.

    Parameters
    ----------
    sch_or_func : Schedule or PrimFunc
        A schedule (lowered first with ``polytile.schedule.lower.lower(sch, args,
        name=name)`` then ``finalize``) or an already lowered and flattened
        :class:`PrimFunc`, compiled as is.
    args : list of Tensor, optional
        The tensors that become the function's parameters, in order (schedules only).
    target : str or Target
        ``"llvm"`` (the host CPU, default) with options, see :class:`Target`.
    name : str
        Name of the generated function (schedules only; a ``PrimFunc`` keeps its own).

    Returns
    -------
    LLVMModule
        Callable with numpy arrays: ``f(a, b, c)``.

    Raises
    ------
    TargetError
        For an unknown target string, or a target that cannot be built yet (``cuda``).
    BuildError
        When code generation or JIT compilation fails.
    """
    tgt = Target.parse(target)
    if tgt.kind == "cuda":
        raise TargetError(format_error(
            "build", f"target {str(tgt)!r} is not implemented yet",
            "expected target 'llvm' (the CUDA backend is being written)"))
    if isinstance(sch_or_func, PrimFunc):
        func = sch_or_func
    else:
        from polytile.schedule.lower import finalize, lower

        func = finalize(lower(sch_or_func, args, name=name))
    from .llvm.runtime import LLVMModule

    return LLVMModule(func, tgt)
