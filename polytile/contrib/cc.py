"""``create_shared`` (TVM's ``tvm.contrib.cc.create_shared``): a shared library from C."""

from __future__ import annotations

import shutil
import subprocess

from polytile.errors import BuildError, format_error


def create_shared(output: str, objects, options=None, cc: str = "g++") -> None:
    """Compile/link ``objects`` (source or object files) into shared library ``output``.

    Raises
    ------
    BuildError
        With the compiler's message when it fails.
    """
    objects = [objects] if isinstance(objects, str) else list(objects)
    exe = shutil.which(cc) or cc
    r = subprocess.run([exe, "-shared", "-fPIC", "-O2", "-o", output, *objects,
                        *(options or [])], capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(format_error("create_shared", f"{cc} failed: {r.stderr[:2000]}",
                                      "sources that compile"))
