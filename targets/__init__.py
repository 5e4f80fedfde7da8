"""Targets: the built-in backends (``llvm``, ``cuda``), their shared pieces, and ``build``.

Backends are registered data (:mod:`polytile.backend`): ``build`` asks the registry for the
target's backend, lowers through every phase of :mod:`polytile.schedule.pipeline` and lets
the backend build a :class:`Module`. Shared pieces: the :class:`Module` protocol
(:mod:`.module`), argument checks and timing (:mod:`.runtime_support`), the C printer
(:mod:`.c_printer`, one table per dialect) and the device-neutral GPU runtime
(:mod:`.gpu`).
"""

from __future__ import annotations

from polytile.backend import (Backend, DeviceLimits, Target, get_backend, register_backend,
                              registered_kinds, unregister_backend)

from .build_module import build
from .llvm.runtime import LLVMModule
from .module import Module

__all__ = ["Backend", "DeviceLimits", "LLVMModule", "Module", "Target", "build", "get_backend",
           "register_backend", "registered_kinds", "unregister_backend"]
