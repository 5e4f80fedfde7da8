"""Tuning templates over symbolic sizes, for concrete values of them.

A template written for a symbolic dimension (its function builds shapes from a
``te.size_var``, so that one built function serves every size) is tuned for a list of
concrete values: ``polytile tune T --args n,512 --sizes n=64,256,1024`` tunes the
workloads ``T(n=64, 512)``, ``T(n=256, 512)``, ``T(n=1024, 512)`` one after another.

In a workload such a size is the string argument ``"n=256"``, so records say which value
each trial was measured at (``"args": ["n=256", 512]``). When the template runs, it gets
a ``te.size_var("n")`` in that position (the schedule stays symbolic: the function built
from a config is the same for every value); the value is used where a number is needed:

* the space: ``cfg.define_split("tile", axis, ...)`` of an axis of extent ``n`` takes its
  factors from the value (:func:`value_of`);
* data: arrays of the workload are made with the value (:func:`concrete_shape`);
* ``flops(...)`` and the numpy ``reference(..., args=...)`` get the values.
"""

from __future__ import annotations

import re
import threading

from polytile.errors import TuneError, format_error

_local = threading.local()
_SIZE_ARG = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\d+)$")


def parse(arg) -> tuple[str, int] | None:
    """``("n", 256)`` for the workload argument ``"n=256"``, else ``None``."""
    if not isinstance(arg, str):
        return None
    m = _SIZE_ARG.match(arg.replace(" ", ""))
    if m is None:
        raise TuneError(format_error("template", f"workload argument {arg!r}",
                                     "an int, or a symbolic size with its value such as "
                                     "'n=256'"))
    return m.group(1), int(m.group(2))


def sizes_of(args) -> dict:
    """``{name: value}`` of the symbolic sizes among workload ``args``."""
    out = {}
    for a in args:
        p = parse(a)
        if p is not None:
            out[p[0]] = p[1]
    return out


def concrete_args(args) -> tuple:
    """``args`` with each symbolic size replaced by its value."""
    return tuple(parse(a)[1] if isinstance(a, str) else a for a in args)


def symbolic_args(args) -> tuple[tuple, dict]:
    """The arguments a template function gets (a ``te.size_var`` per symbolic size, one
    per name) and ``{name: value}``."""
    from polytile import te

    made: dict = {}
    out = []
    for a in args:
        p = parse(a)
        if p is None:
            out.append(a)
            continue
        if p[0] not in made:
            made[p[0]] = te.size_var(p[0])
        out.append(made[p[0]])
    return tuple(out), sizes_of(args)


class binding:  # noqa: N801 - used as a context manager, like contextlib helpers
    """Make ``{name: value}`` the sizes :func:`value_of` uses in the ``with`` body."""

    def __init__(self, sizes: dict):
        self.sizes = sizes

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self.sizes)
        return self.sizes

    def __exit__(self, *exc):
        _local.stack.pop()


def current() -> dict:
    """The sizes bound by the innermost :class:`binding` (empty outside one)."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else {}


def value_of(e, sizes: dict | None = None) -> int | None:
    """The value of an extent (an int, or an expression of size variables, looked up by
    name in ``sizes`` or the current binding); ``None`` when a size is unknown."""
    from polytile.targets.runtime_support import eval_size
    from polytile.te.expr import Var
    from polytile.te.visitor import collect

    sizes = current() if sizes is None else sizes
    if isinstance(e, int):
        return e
    if not hasattr(e, "dtype"):
        return None
    env = {v: sizes[v.name] for v in collect(e, Var) if v.name in sizes}
    return eval_size(e, env)


def concrete_shape(shape, sizes: dict) -> tuple:
    """A tensor's shape with symbolic sizes replaced by their values.

    Raises
    ------
    TuneError
        For a dimension whose sizes are not all given.
    """
    out = []
    for d in shape:
        v = value_of(d, sizes)
        if v is None:
            raise TuneError(format_error("tune", f"the shape {tuple(map(str, shape))} has the "
                                         f"symbolic dimension {d}", "a value for each size",
                                         hint="give them with --sizes name=v1,v2,..."))
        out.append(v)
    return tuple(out)
