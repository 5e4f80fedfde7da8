"""``polytile.target``: targets by TVM's names (``tvm.target.Target``).

``polytile.target.Target("llvm -mcpu=znver4")`` parses a target string into the one target
description of polytile, :class:`polytile.backend.Target` (an immutable dataclass; its
fields, options and device limits are documented there), and
``isinstance(t, polytile.target.Target)`` holds for every such object. Target strings are
``<kind> [-option[=value]]...`` with the kinds of the backend registry (``llvm``, ``cuda``,
``hip``; ``polytile targets`` lists them with their options).
"""

from __future__ import annotations

from polytile.backend import Target as _Target
from polytile.backend import current_target, registered_kinds
from polytile.errors import TargetError, format_error


class _TargetMeta(type):
    # Target(...) parses and returns the backend's dataclass, so that there is one target
    # type in polytile; isinstance(x, Target) asks about that type.
    def __call__(cls, target, host=None) -> _Target:
        t = _Target.parse(target)
        if host is not None and _Target.parse(host).kind != "llvm":
            raise TargetError(format_error(
                "Target", f"host target {str(host)!r}", "expected an 'llvm' host (the "
                "host side of every polytile function runs on this CPU) or None"))
        return t

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _Target)


class Target(metaclass=_TargetMeta):
    """A compilation target (TVM's ``tvm.target.Target``).

    ``Target(target, host=None)`` parses ``target`` (a string such as ``"llvm"``,
    ``"llvm -mcpu=skylake-avx512"``, ``"cuda -arch=sm_90"``, or a target, which passes
    through) and returns a :class:`polytile.backend.Target`: ``kind``, ``cpu``,
    ``features``, ``arch``, ``limits``... ``host`` may be given as in TVM; it must be an
    ``llvm`` target (polytile runs the host side of GPU functions from Python).

    Raises
    ------
    TargetError
        For an unknown kind, options its backend refuses, or a non-llvm ``host``.
    """

    @staticmethod
    def current(allow_none: bool = True) -> _Target | None:
        """The target of the innermost ``with target:`` block (TVM's
        ``Target.current``); None outside any (a ``TargetError`` with
        ``allow_none=False``)."""
        t = current_target()
        if t is None and not allow_none:
            raise TargetError(format_error("Target.current", "no target is active",
                                           "enter one with `with Target('llvm'):`"))
        return t

    @staticmethod
    def list_kinds() -> list:
        """The registered target kinds (TVM's ``Target.list_kinds``)."""
        return list(registered_kinds())


def cuda(arch: str | None = None, options: str = "") -> _Target:
    """A CUDA target (TVM's ``tvm.target.cuda``): ``arch`` such as ``"sm_90"`` (default:
    device 0's, else ``sm_90``), other options as in the target string."""
    spec = "cuda" + (f" -arch={arch}" if arch else "") + (f" {options}" if options else "")
    return _Target.parse(spec)


def llvm(mcpu: str | None = None, options: str = "") -> _Target:
    """A CPU target; ``mcpu`` is LLVM's CPU name (default: this machine's)."""
    spec = "llvm" + (f" -mcpu={mcpu}" if mcpu else "") + (f" {options}" if options else "")
    return _Target.parse(spec)


def rocm(mcpu: str | None = None, options: str = "") -> _Target:
    """An AMD GPU target (TVM's ``tvm.target.rocm``), polytile's ``hip`` kind: ``mcpu`` one
    of ``gfx90a``, ``gfx942`` (default), ``gfx950``; other options as in the target
    string."""
    spec = "hip" + (f" -mcpu={mcpu}" if mcpu else "") + (f" {options}" if options else "")
    return _Target.parse(spec)


__all__ = ["Target", "cuda", "llvm", "rocm"]


#: TVM names of ``tvm.target`` that rewrite math intrinsics per target: what polytile does
#: instead (its math functions are lowered by one table per target dialect)
_INTRIN_RULES = ("register_intrin_rule", "intrin")


def __getattr__(name: str):
    if name in _INTRIN_RULES:
        raise AttributeError(format_error(
            f"target.{name}", "TVM's registration of per-target lowering rules for math "
            "intrinsics (tutorial intrin_math) does not exist in polytile: te.exp and the "
            "other math functions map to each target's functions through a fixed table "
            "(expf/__expf on CUDA, vector code on llvm)",
            "expected a call of the function wanted in the compute itself",
            hint="te.compute(..., lambda i: tir.call_pure_extern('float32', '__expf', "
            "A[i])); for fast approximations te.fast_exp or target 'cuda -fast-math'"))
    raise AttributeError(f"module 'polytile.target' has no attribute {name!r}")
