"""The dispatch context stack and target names, shared by templates and dispatch.

A template call (:meth:`polytile.autotune.template.Template.__call__`) asks
:func:`current_context` which config to use; :class:`~.dispatch.ApplyHistoryBest` pushes
itself here. Records name targets by :func:`canonical_target`.
"""

from __future__ import annotations

import functools
import threading

from polytile.backend import Target, current_target

_local = threading.local()


def contexts() -> list:
    """The active dispatch contexts of this thread, innermost last."""
    if not hasattr(_local, "ctx"):
        _local.ctx = []
    return _local.ctx


def current_context():
    """The innermost active dispatch context, or None."""
    st = contexts()
    return st[-1] if st else None


@functools.lru_cache(maxsize=None)
def canonical_target(target: str = "llvm") -> str:
    """The target string records use, from the target's backend (``Backend.canonical``):
    ``"llvm"`` becomes ``"llvm -mcpu=<host cpu>"`` so records of different machines are
    told apart.

    Raises
    ------
    TargetError
        For an unparsable target string.
    """
    t = Target.parse(target)
    return t.backend.canonical(t)


def default_target() -> str:
    """The canonical target of the innermost ``with polytile.target.Target(...):`` block
    (AutoTVM's way of naming the target a template is instantiated for), else the host
    target, ``llvm -mcpu=<host>``."""
    t = current_target()
    return canonical_target(str(t) if t is not None else "llvm")
