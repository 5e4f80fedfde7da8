"""Helpers under TVM's ``tvm.contrib`` names: ``utils.tempdir``, ``clang.create_llvm``,
``cc.create_shared``."""

from . import cc, clang, utils

__all__ = ["cc", "clang", "utils"]
