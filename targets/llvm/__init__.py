"""The LLVM CPU backend: code generation with llvmlite's IR builder and a JIT runtime.

``codegen_llvm(func, target)`` builds an ``llvmlite.ir.Module`` from loop IR;
``LLVMModule(func, target)`` compiles it and is callable with numpy arrays; :mod:`.backend`
registers the ``llvm`` kind.
"""

from __future__ import annotations

from ..runtime_support import BenchmarkResult
from .backend import CPU_LIMITS, LLVMBackend
from .codegen import codegen_llvm
from .runtime import LLVMModule, get_num_threads, set_num_threads

__all__ = ["BenchmarkResult", "CPU_LIMITS", "LLVMBackend", "LLVMModule", "codegen_llvm",
           "get_num_threads", "set_num_threads"]
