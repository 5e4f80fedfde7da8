"""polytile: a tensor compiler with TVM-style schedules lowered through isl.

``polytile.lower(s, args)`` returns the loop IR of a schedule; ``polytile.build(s, args,
target="llvm")`` compiles it into a callable (``target="cuda"`` for NVIDIA GPUs, with device
arrays from ``polytile.nd``). See ``README.md`` for a tour.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (BuildError, InternalError, LoweringError, PolytileError, ScheduleError,
                     TargetError, TuneError)
from . import logconfig as _logconfig
from .backend import DEFAULT_TARGET


def _log_from_env() -> None:
    # a bad POLYTILE_LOG must not make ``import polytile`` fail: warn and log nothing
    import warnings

    try:
        level = _logconfig.level_from_env()
    except ValueError as e:
        warnings.warn(f"{e}; polytile logs nothing", stacklevel=3)
        return
    if level is not None:
        _logconfig.configure(level)


_log_from_env()


# The functions below import their modules when called, not at the top: ``import polytile``
# stays light (no islpy, llvmlite or cuda-python until something is lowered or built), which
# keeps the command line and worker processes quick to start.

def lower(sch, args, name: str = "main", target=None, simple_mode: bool = False,
          binds=None, **kwargs):
    """Lower a schedule to loop IR; see :func:`polytile.schedule.pipeline.lower`.

    TVM's ``lower(inp, args, name, binds, simple_mode)`` runs unchanged: ``binds`` (also
    a dict in the fourth place, where polytile takes ``target``) must be empty, as in
    :func:`build`; ``simple_mode`` is accepted."""
    from polytile.schedule.pipeline import lower as _lower

    if isinstance(target, dict):   # TVM's fourth positional argument is binds
        binds, target = target, None
    if binds:
        from polytile.errors import format_error

        raise TargetError(format_error(
            "lower", f"binds of {len(binds)} tensors are given",
            "expected no binds (arguments are compact row-major arrays)",
            hint="bind buffers of tensor intrinsics through te.decl_tensor_intrin(..., "
            "binds=...)"))
    return _lower(sch, args, name=name, target=target, simple_mode=simple_mode, **kwargs)


def build(sch, args=None, target=DEFAULT_TARGET, target_host=None, name: str = "main",
          binds=None, **kwargs):
    """Compile a schedule for ``target`` (TVM's positional order: ``inputs, args, target,
    target_host, name, binds``; not given: the current ``with Target(...)`` one, else
    ``"llvm"``); see :func:`polytile.targets.build`."""
    from polytile.targets import build as _build

    return _build(sch, args, target=target, target_host=target_host, name=name, binds=binds,
                  **kwargs)


def register_func(func_name, f=None, override: bool = False):
    """Register a Python function by name (TVM's ``tvm.register_func``), for
    ``tir.call_packed``; see :func:`polytile.registry.register_func`."""
    from polytile.registry import register_func as _reg

    return _reg(func_name, f, override)


def get_global_func(name: str, allow_missing: bool = False):
    """The function registered as ``name`` (TVM's ``tvm.get_global_func``); see
    :func:`polytile.registry.get_global_func`."""
    from polytile.registry import get_global_func as _get

    return _get(name, allow_missing)


def set_num_threads(n: int) -> None:
    """Number of CPU threads (OpenMP) that parallel loops of built functions use."""
    from polytile.targets.llvm.runtime import set_num_threads as _set

    _set(n)


def get_num_threads() -> int:
    """Number of CPU threads that parallel loops of built functions use."""
    from polytile.targets.llvm.runtime import get_num_threads as _get

    return _get()


def cpu(dev_id: int = 0):
    """The host device (TVM's ``tvm.cpu(0)``); see :mod:`polytile.nd`."""
    from polytile.nd import cpu as _cpu

    return _cpu(dev_id)


def device(dev_type="cpu", dev_id: int = 0):
    """A device by name (TVM's ``tvm.device("cpu", 0)``); see :func:`polytile.nd.device`."""
    from polytile.nd import device as _device

    return _device(dev_type, dev_id)


def cuda(dev_id: int = 0):
    """CUDA device ``dev_id`` (TVM's ``tvm.cuda(0)``); see :mod:`polytile.nd`."""
    from polytile.nd import cuda as _cuda

    return _cuda(dev_id)


_SUBMODULES = ("backend", "nd", "te", "schedule", "targets", "autotune", "target", "runtime",
               "tir", "contrib", "testing", "autotvm", "registry")


def __getattr__(name: str):
    # submodules are imported on first use, so that ``import polytile`` stays light and
    # never needs cuda-python
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"polytile.{name}")
    raise AttributeError(f"module 'polytile' has no attribute {name!r}")


__all__ = ["BuildError", "InternalError", "LoweringError", "PolytileError", "ScheduleError",
           "TargetError", "TuneError", "__version__", "autotune", "build", "cpu", "cuda",
           "get_global_func", "get_num_threads", "lower", "register_func", "registry", "autotvm", "nd", "runtime", "schedule", "set_num_threads", "target",
           "targets", "te", "tir", "contrib", "testing", "device"]
