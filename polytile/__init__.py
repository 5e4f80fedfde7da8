"""polytile: a tensor compiler with TVM-style schedules lowered through isl.

``polytile.lower(s, args)`` returns the loop IR of a schedule; ``polytile.build(s, args,
target="llvm")`` compiles it into a callable (``target="cuda"`` for NVIDIA GPUs, with device
arrays from ``polytile.nd``). See ``README.md`` for a tour.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (BuildError, InternalError, LoweringError, PolytileError, ScheduleError,
                     TargetError, TuneError)


def lower(sch, args, name: str = "main", **kwargs):
    """Lower a schedule to loop IR; see :func:`polytile.schedule.lower`."""
    from polytile.schedule.lower import lower as _lower

    return _lower(sch, args, name=name, **kwargs)


def build(sch, args=None, target="llvm", name: str = "main", **kwargs):
    """Compile a schedule for ``target``; see :func:`polytile.targets.build`."""
    from polytile.targets import build as _build

    return _build(sch, args, target=target, name=name, **kwargs)


def set_num_threads(n: int) -> None:
    """Number of CPU threads (OpenMP) that parallel loops of built functions use."""
    from polytile.targets.llvm.runtime import set_num_threads as _set

    _set(n)


def get_num_threads() -> int:
    """Number of CPU threads that parallel loops of built functions use."""
    from polytile.targets.llvm.runtime import get_num_threads as _get

    return _get()


def __getattr__(name: str):
    # ``polytile.nd`` is imported on first use, so that ``import polytile`` never needs
    # cuda-python
    if name == "nd":
        import importlib

        return importlib.import_module("polytile.nd")
    raise AttributeError(f"module 'polytile' has no attribute {name!r}")


__all__ = ["BuildError", "InternalError", "LoweringError", "PolytileError", "ScheduleError",
           "TargetError", "TuneError", "__version__", "build", "get_num_threads", "lower", "nd",
           "set_num_threads"]
