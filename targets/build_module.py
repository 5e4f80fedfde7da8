"""``build``: compile a schedule or a lowered function for a target, through its backend."""

from __future__ import annotations

from polytile.backend import DEFAULT_TARGET, Target, current_target
from polytile.errors import TargetError, format_error
from polytile.schedule.loop_ir import PrimFunc
from polytile.schedule.pipeline import lower, run_backend_passes
from polytile.te.depth import deep

from .module import Module


@deep("build")
def build(sch_or_func, args=None, target: str | Target = DEFAULT_TARGET, target_host=None,
          name: str = "main", binds=None, **options) -> Module:
    """Compile ``sch_or_func`` into a callable module.

    The positional order is TVM's ``build(inputs, args, target, target_host, name,
    binds)``.

    Parameters
    ----------
    sch_or_func : Schedule or PrimFunc
        A schedule (lowered through every phase of :mod:`polytile.schedule.pipeline` for
        ``target``) or an already lowered and flattened :class:`PrimFunc`, which gets only
        the target backend's own passes.
    args : list of Tensor, optional
        The tensors that become the function's parameters, in order (schedules only).
    target : str or Target
        A registered kind with options (``"llvm"``, the host CPU, default; ``"cuda"``, an
        NVIDIA GPU; see :mod:`polytile.backend`). Not given: the target of the innermost
        ``with polytile.target.Target(...):`` block, else ``"llvm"``.
    target_host : str or Target, optional
        TVM's host target: an ``llvm`` target or None. The host code of every target runs
        on this machine's CPU (``llvm`` functions are host code; a GPU module is launched
        by polytile's runtime), so it selects nothing.
    name : str
        Name of the generated function (schedules only; a ``PrimFunc`` keeps its own).
    binds : dict, optional
        TVM's tensor-to-buffer bindings: only empty (polytile's arguments are compact
        row-major arrays; ``tir.decl_buffer`` binds belong to ``decl_tensor_intrin``).
    **options
        Options of the backend's ``build_module`` (its ``build_options``; for ``cuda``:
        ``compiler`` and ``cache_dir``, see :class:`~polytile.targets.cuda.CUDAModule`).

    Returns
    -------
    Module
        Callable with the backend's arrays (numpy for ``llvm``; ``polytile.nd`` device
        arrays or torch tensors for ``cuda``): ``f(a, b, c)``. Building for ``cuda`` needs
        no GPU (the source is generated and compiled for ``sm_90`` unless ``-arch`` or a
        present GPU says otherwise); calling needs one.

    Raises
    ------
    TargetError
        For an unknown target string, options the backend does not take, a
        ``target_host`` of another kind than ``llvm`` or non-empty ``binds``.
    ScheduleError
        For an illegal schedule, or one that does not fit the target (GPU bindings on a
        CPU target, no GPU bindings on a GPU target, device limits exceeded).
    LoweringError
        For a GPU function with statements outside its kernels.
    BuildError
        When code generation or compilation fails.
    """
    if target is DEFAULT_TARGET and current_target() is not None:
        target = current_target()
    tgt = Target.parse(target)
    if target_host is not None:
        _check_target_host(target_host)
    if binds:
        raise TargetError(format_error(
            "build", f"binds of {len(binds)} tensors are given",
            "expected no binds (arguments are compact row-major arrays)",
            hint="bind buffers of tensor intrinsics through te.decl_tensor_intrin(..., "
            "binds=...)"))
    backend = tgt.backend
    unknown = sorted(set(options) - set(backend.build_options))
    if unknown:
        expected = (f"expected only {', '.join(backend.build_options)} for {tgt.kind!r}"
                    if backend.build_options else f"expected no extra options for {tgt.kind!r}")
        raise TargetError(format_error(
            "build", f"options {unknown} are not understood by target {str(tgt)!r}", expected))
    if isinstance(sch_or_func, PrimFunc):
        func = run_backend_passes(sch_or_func, tgt)
    else:
        func = lower(sch_or_func, args, name=name, target=tgt, stop_after=None, who="build")
    return backend.build_module(func, tgt, **options)


def _check_target_host(target_host) -> None:
    """Refuse a ``target_host`` that is not an ``llvm`` target. A string that is no
    target at all is most likely a function name passed as the fourth positional argument
    (polytile's order once was ``name`` there; TVM's is ``target_host``)."""
    expected = "expected an 'llvm' target or None (the host code runs on this machine's CPU)"
    try:
        kind = Target.parse(target_host).kind
    except TargetError:
        raise TargetError(format_error(
            "build", f"target_host={target_host!r} is not a target", expected,
            hint="the 4th positional argument of build is target_host, as in TVM's "
            "build(inputs, args, target, target_host, name); pass the function name as "
            "name=...")) from None
    if kind != "llvm":
        raise TargetError(format_error("build", f"target_host={str(target_host)!r}", expected))
