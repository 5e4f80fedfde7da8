"""The LLVM CPU backend: code generation with llvmlite's IR builder and a JIT runtime.

``codegen_llvm(func, target)`` builds an ``llvmlite.ir.Module`` from loop IR;
``LLVMModule(func, target)`` compiles it and is callable with numpy arrays.
"""

from __future__ import annotations

from .codegen import codegen_llvm
from .runtime import BenchmarkResult, LLVMModule, get_num_threads, set_num_threads

__all__ = ["BenchmarkResult", "LLVMModule", "codegen_llvm", "get_num_threads",
           "set_num_threads"]
