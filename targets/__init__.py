"""Targets: target descriptions, the LLVM CPU backend and ``build``."""

from __future__ import annotations

from .build import build
from .llvm.runtime import LLVMModule
from .target import Target

__all__ = ["LLVMModule", "Target", "build"]
