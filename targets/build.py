"""``build``: compile a schedule or a lowered function for a target."""

from __future__ import annotations

from polytile.errors import TargetError, format_error
from polytile.schedule.loop_ir import PrimFunc
from polytile.te.depth import deep

from .target import Target


@deep("build")
def build(sch_or_func, args=None, target: str | Target = "llvm", name: str = "main",
          **options):
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
        ``"llvm"`` (the host CPU, default) or ``"cuda"`` (an NVIDIA GPU), with options, see
        :class:`Target`.
    name : str
        Name of the generated function (schedules only; a ``PrimFunc`` keeps its own).
    **options
        For ``cuda``: ``compiler`` (``"auto"``, ``"nvrtc"``, ``"nvcc"``) and ``cache_dir``
        (the cubin cache), see :class:`~polytile.targets.cuda.CUDAModule`.

    Returns
    -------
    LLVMModule or CUDAModule
        Callable with numpy arrays (``llvm``) or device arrays (``cuda``: ``polytile.nd``,
        torch tensors): ``f(a, b, c)``. Building for ``cuda`` needs no GPU (the source is
        generated and compiled for ``sm_90`` unless ``-arch`` or a present GPU says
        otherwise); calling needs one.

    Raises
    ------
    TargetError
        For an unknown target string, or options the target does not take.
    LoweringError
        For a ``cuda`` function with statements outside its kernels.
    BuildError
        When code generation or compilation fails.
    """
    tgt = Target.parse(target)
    if options and tgt.kind != "cuda":
        raise TargetError(format_error(
            "build", f"options {sorted(options)} are not understood by target {str(tgt)!r}",
            "expected no extra options for 'llvm'"))
    if isinstance(sch_or_func, PrimFunc):
        func = sch_or_func
    else:
        from polytile.schedule.lower import finalize, lower, uses_gpu
        from polytile.schedule.validate import check_lower_inputs

        check_lower_inputs(sch_or_func, args, "build")
        gpu = uses_gpu(sch_or_func)
        if gpu != (tgt.kind == "cuda"):
            from polytile.errors import ScheduleError

            raise ScheduleError(format_error(
                "build", f"target {str(tgt)!r} " + (
                    "runs on the CPU, but the schedule binds loops to GPU indices" if gpu else
                    "needs GPU kernels, but no loop of the schedule is bound to a GPU index"),
                "build for target 'cuda'" if gpu else "bind loops with s[T].bind(axis, "
                "te.thread_axis('blockIdx.x')) and 'threadIdx.x'"))
        func = finalize(lower(sch_or_func, args, name=name))
    if tgt.kind == "cuda":
        from polytile.schedule.passes.narrow import narrow_indices

        from .cuda.runtime import CUDAModule

        # GPUs run 32-bit index arithmetic natively (a no-op for buffers of 2**30 elements)
        return CUDAModule(narrow_indices(func), tgt, **options)
    from .llvm.runtime import LLVMModule

    return LLVMModule(func, tgt)
