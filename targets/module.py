"""The one protocol of a built function: :class:`Module`.

Every backend's ``build_module`` returns a :class:`Module`: callable on the backend's
arrays, with ``get_source`` (the generated code as text, or bytes for a binary format),
``time_evaluator`` (TVM's timing loop, written once here: a backend supplies only its clock
through ``_timer``), ``export_library`` (the compiled code written to a file, the format
picked by the file's suffix) and ``entry_name`` (the function's name in the generated
code). ``func`` is the lowered loop IR it was built from, ``target`` its
:class:`~polytile.backend.Target`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import ClassVar

from polytile.errors import format_error
from polytile.schedule.loop_ir import PrimFunc

from .runtime_support import BenchmarkResult, check_timing_args, measure


class Module:
    """Base class of built functions (see the module docstring).

    Subclasses implement ``__call__``, ``get_source`` and the exports of
    ``export_formats``; the timing loop calls ``_bind`` (host clock) or a subclass's own
    ``_timer`` (a device clock).
    """

    #: ``get_source`` formats; the first one is the default
    source_formats: ClassVar[tuple] = ()
    #: file suffix -> ``get_source`` format written by ``export_library``; a subclass adds
    #: binary exports by overriding ``_export``
    export_formats: ClassVar[dict] = {}

    def __init__(self, func: PrimFunc, target):
        self.func = func
        self.target = target
        self.name = func.name

    @property
    def entry_name(self) -> str:
        """Name of the function in the generated code (the ``PrimFunc``'s name)."""
        return self.func.name

    def __call__(self, *args) -> None:
        raise NotImplementedError

    def get_source(self, fmt: str | None = None):
        """The generated code in format ``fmt`` (default ``source_formats[0]``)."""
        raise NotImplementedError

    @property
    def device(self):
        """The :class:`~polytile.targets.gpu.device_api.Device` this module runs on (the host
        for CPU backends)."""
        from .gpu.device_api import Device

        return Device("cpu", 0)

    @property
    def imported_modules(self) -> list:
        """TVM's ``mod.imported_modules``: the device code modules of a host module (TVM's
        reduction tutorial prints ``fcuda.imported_modules[0].get_source()``). A CPU module
        imports none; a GPU module is host and device code in one, so it lists itself."""
        return []

    def __getitem__(self, name: str) -> Module:
        """The function named ``name`` (TVM's ``mod[name]``): this module, whose one
        function is ``entry_name``.

        Raises
        ------
        KeyError
            For another name; the message lists the available ones.
        """
        if name != self.entry_name:
            raise KeyError(format_error(
                f"{type(self).__name__}[{name!r}]", f"no function named {name!r}",
                f"expected one of {[self.entry_name]}"))
        return self

    def get_function(self, name: str) -> Module:
        """TVM's ``mod.get_function(name)``: the same as ``mod[name]``.

        Raises
        ------
        KeyError
            For a name other than ``entry_name``.
        """
        return self[name]

    # ------------------------------------------------------------------ timing
    def time_evaluator(self, *args, number: int | None = None, repeat: int | None = None,
                       min_repeat_ms: float | None = None, func_name: str | None = None,
                       dev=None):
        """A function that times this module on given arguments (TVM's ``time_evaluator``).

        Two call forms: TVM's ``time_evaluator(func_name, dev, number=10, repeat=1,
        min_repeat_ms=0)`` (``func_name`` must be ``entry_name``, ``dev`` the module's
        device, both may be given positionally or by keyword) and polytile's
        ``time_evaluator(number=10, repeat=1, min_repeat_ms=0)``, whose values may also be
        positional. Both return the same evaluator.

        The returned ``f(*args) -> BenchmarkResult`` (``.mean``, ``.median``, ``.results``
        in seconds, as TVM's ``BenchmarkResult``) validates ``args`` once, runs the
        function once as warm-up, then ``repeat`` times measures ``number`` consecutive
        calls and records their mean (seconds; on the device's own clock for GPU
        backends). With ``min_repeat_ms > 0``, ``number`` grows (by at least the golden
        ratio, or to the count the last measurement predicts) until one repeat lasts at
        least ``min_repeat_ms`` milliseconds; the grown ``number`` carries over to later
        repeats (:func:`~polytile.targets.runtime_support.measure`).

        Raises
        ------
        ValueError
            If ``number`` or ``repeat`` is below 1 or ``min_repeat_ms`` is negative, or
            ``dev`` is not the module's device.
        KeyError
            If ``func_name`` is not ``entry_name``.
        TypeError
            For too many positional arguments, or one given both ways.
        """
        number, repeat, min_repeat_ms = self._timing_args(
            args, dict(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                       func_name=func_name, dev=dev))
        check_timing_args(number, repeat, min_repeat_ms)

        def evaluator(*args) -> BenchmarkResult:
            with self._timer(args) as run:
                return measure(run, number, repeat, min_repeat_ms)

        return evaluator

    def _timing_args(self, args: tuple, kw: dict) -> tuple:
        """``(number, repeat, min_repeat_ms)`` of either call form of ``time_evaluator``."""
        tvm_form = bool(args) and isinstance(args[0], str) or kw["func_name"] is not None
        names = (("func_name", "dev", "number", "repeat", "min_repeat_ms") if tvm_form
                 else ("number", "repeat", "min_repeat_ms"))
        if len(args) > len(names):
            raise TypeError(format_error(
                "time_evaluator", f"{len(args)} positional arguments",
                f"expected at most {len(names)}: ({', '.join(names)})"))
        for name, value in zip(names, args):
            if kw[name] is not None:
                raise TypeError(format_error("time_evaluator", f"{name!r} given twice",
                                             "expected it once, by position or by keyword"))
            kw[name] = value
        if kw["func_name"] is not None:
            self[kw["func_name"]]  # KeyError naming the available function
        if kw["dev"] is not None:
            self._check_device(kw["dev"])
        number = 10 if kw["number"] is None else kw["number"]
        repeat = 1 if kw["repeat"] is None else kw["repeat"]
        return number, repeat, 0 if kw["min_repeat_ms"] is None else kw["min_repeat_ms"]

    def _check_device(self, dev) -> None:
        from polytile.nd import device as _device

        d = _device(dev) if isinstance(dev, str) else dev
        if d != self.device:
            raise ValueError(format_error(
                "time_evaluator", f"device {dev!r} is not the one {self.entry_name!r} runs "
                f"on", f"expected {self.device} (the module's target is {str(self.target)!r})"))

    @contextlib.contextmanager
    def _timer(self, args: tuple, clock: Callable[[], float] = time.perf_counter):
        """Validate ``args``, warm up, and yield ``run(n)``: the seconds of ``n``
        consecutive calls on the host ``clock`` (the wall clock; the tuner may pass the
        process's CPU time, :mod:`polytile.autotune.timing`). ``_bind`` gives the call;
        its last result goes to ``_check_result`` after the loop (a failure is still
        reported, at no cost per call)."""
        call = self._bind(args)
        self._check_result(call())  # warm-up

        def run(n: int) -> float:
            t0 = clock()
            for _ in range(n):
                r = call()
            t1 = clock()
            self._check_result(r)
            return t1 - t0

        yield run

    def _bind(self, args: tuple) -> Callable[[], object]:
        """A function of no arguments that runs the module on ``args`` (checked here,
        once)."""
        return lambda: self(*args)

    def _check_result(self, result) -> None:
        """Raise for the failure ``result`` of a bound call reports (nothing by default)."""

    # ------------------------------------------------------------------ export
    def export_library(self, path: str | os.PathLike) -> str:
        """Write the compiled function to ``path``; its suffix picks the format (see
        ``export_formats`` of each module). Returns the path written.

        Raises
        ------
        ValueError
            For a suffix this module cannot write.
        BuildError
            When producing the file fails (a linker error).
        """
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1]
        known = sorted(set(self.export_formats) | set(self._binary_exports()))
        if suffix not in known:
            raise ValueError(format_error(
                "export_library", f"cannot write {os.path.basename(path)!r} for "
                f"{type(self).__name__}", f"expected a file name ending in {', '.join(known)}"))
        if suffix in self.export_formats:
            data = self.get_source(self.export_formats[suffix])
            mode = "wb" if isinstance(data, bytes) else "w"
            with open(path, mode) as fh:
                fh.write(data)
        else:
            self._export(path, suffix)
        return path

    def save(self, file_name: str | os.PathLike, fmt: str = "") -> str:
        """TVM's ``Module.save(file_name, fmt)``: :meth:`export_library` of ``file_name``
        (``fmt``, when given, must agree with its suffix: ``"ll"``, ``"s"``, ``"o"``...).

        Raises
        ------
        ValueError
            For a suffix this module cannot write, or a ``fmt`` that differs from it.
        """
        suffix = os.path.splitext(os.fspath(file_name))[1].lstrip(".")
        if fmt and fmt.lstrip(".") != suffix:
            raise ValueError(format_error(
                "save", f"fmt={fmt!r} for {os.path.basename(os.fspath(file_name))!r}",
                "expected the format its suffix names (or no fmt)"))
        return self.export_library(file_name)

    def _binary_exports(self) -> tuple:
        """Suffixes ``_export`` writes beyond the source formats."""
        return ()

    def _export(self, path: str, suffix: str) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, target={str(self.target)!r})"


__all__ = ["BenchmarkResult", "Module"]
