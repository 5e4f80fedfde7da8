"""The one exception hierarchy of polytile.

Every error a user can trigger derives from :class:`PolytileError`. Messages follow the house
format ``<primitive>: <what is wrong>; <what was expected>`` followed by optional labelled
context lines (``Stage:``, ``Loop nest:``) and a ``hint:`` line.
"""

from __future__ import annotations

from typing import NoReturn


class PolytileError(Exception):
    """Base class of every error raised by polytile."""


class ScheduleError(PolytileError, ValueError):
    """An illegal or malformed schedule: raised by a primitive or at lower time."""


class DefinitionError(PolytileError):
    """A malformed tensor-expression definition (``te``: shapes, dtypes, axes, operands).
    Each concrete class also inherits the built-in exception it stands for, so that
    ``except TypeError`` and ``except ValueError`` keep working."""


class DefinitionTypeError(DefinitionError, TypeError):
    """An operand or argument of the wrong kind or dtype in a ``te`` definition."""


class DefinitionValueError(DefinitionError, ValueError):
    """A ``te`` argument of the right kind but a wrong value (a shape, a range)."""


class DefinitionOverflowError(DefinitionError, OverflowError):
    """A ``te`` constant outside its dtype (``te.const(300, "int8")``)."""


class DefinitionZeroDivisionError(DefinitionError, ZeroDivisionError):
    """An integer division by the constant 0 in a ``te`` expression."""


class DefinitionIndexError(DefinitionError, IndexError):
    """A tensor indexed with the wrong number of indices."""


class LoweringError(PolytileError):
    """A schedule that is legal but cannot be lowered (an unsupported construct)."""


class TargetError(PolytileError, ValueError):
    """An unknown target string or a target that this machine cannot run."""


class DeviceNotFoundError(TargetError, RuntimeError):
    """A target's device is missing on this machine (no GPU, no driver, no cuda-python):
    the function was built but cannot run here."""


class DeviceError(PolytileError, RuntimeError):
    """A call into a device runtime failed (a CUDA driver error, e.g. a faulting kernel);
    the message names the function and kernel."""


class BuildError(PolytileError):
    """Code generation or native compilation failed; the message carries the log."""


class TuneError(PolytileError):
    """A tuning run cannot proceed (bad template, unreadable records, ...)."""


class PolytileWarning(UserWarning):
    """A schedule was accepted with a fallback (a resource limit was reached); the message
    names the primitive, stage and loop, what was done instead and a hint."""


def warn(message: str) -> None:
    """Issue a :class:`PolytileWarning` attributed to the first caller outside polytile
    (the user's ``lower``/``build`` call), whatever the depth of the call inside it."""
    import sys
    import warnings

    level, frame = 2, sys._getframe(1)   # stacklevel 2 is the caller of warn()
    while frame is not None and frame.f_globals.get("__name__", "").startswith("polytile"):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, PolytileWarning, stacklevel=level)


class InternalError(PolytileError):
    """A bug in polytile itself: please report it with the schedule that triggered it."""


def format_error(primitive: str, what: str, expected: str | None = None, *,
                 hint: str | None = None, **context: str) -> str:
    """Build a message in the house format.

    ``format_error("split", "iter_var 'k' was already split", "split 'k.outer' instead",
    Stage="C")`` gives ``split: iter_var 'k' was already split; split 'k.outer' instead``
    followed by ``Stage: C``.
    """
    msg = f"{primitive}: {what}"
    if expected:
        msg += f"; {expected}"
    for label, text in context.items():
        msg += f"\n  {label.replace('_', ' ')}: {text}"
    if hint:
        msg += f"\n  hint: {hint}"
    return msg


def fail(primitive: str, what: str, expected: str | None = None, *,
         error: type = None, hint: str | None = None, **context: str) -> NoReturn:
    """Raise ``error`` (default :class:`ScheduleError`) with a house-format message: the
    one helper behind every ``fail("compute_at", "...", "...", Stage="C")`` of the
    schedule and lowering modules (see :func:`format_error`)."""
    raise (error or ScheduleError)(format_error(primitive, what, expected, hint=hint, **context))
