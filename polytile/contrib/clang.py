"""``create_llvm`` (TVM's ``tvm.contrib.clang.create_llvm``): C source to LLVM IR text, for
``s[T].pragma(axis, "import_llvm", text)``.

With ``clang`` on PATH the text is clang's LLVM IR. Without it, the source is compiled
with the system C compiler (``g++`` for source with ``extern "C"``, else ``cc``) into a
shared library, and the text returned is an empty LLVM module naming that library on a
``; polytile-shared-library:`` line: importing it loads the library, so the extern
functions resolve the same way (documented fallback; the functions are then not inlined).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from polytile.errors import BuildError, format_error


def find_clang(required: bool = True) -> list[str]:
    """Paths of clang executables on PATH (empty list when none and not ``required``)."""
    found = [p for p in (shutil.which("clang"),) if p]
    if not found and required:
        raise BuildError(format_error("find_clang", "clang is not installed",
                                      "clang on PATH"))
    return found


def create_llvm(inputs, output: str | None = None, options=None, cc: str | None = None) -> str:
    """LLVM IR text of C/C++ source ``inputs`` (a string, or a list of them).

    Parameters
    ----------
    inputs : str or list of str
        Source code.
    output : str, optional
        Where to write the result (``.ll``); a temporary file by default.
    options : list of str, optional
        Extra compiler options.
    cc : str, optional
        The clang to use.

    Raises
    ------
    BuildError
        When compilation fails (the compiler's message).
    """
    from polytile.targets.llvm.runtime import SHARED_LIBRARY_TAG, compile_c

    code = inputs if isinstance(inputs, str) else "\n".join(inputs)
    out_dir = os.path.dirname(output) if output else tempfile.mkdtemp(prefix="polytile_ll_")
    output = output or os.path.join(out_dir, "output.ll")
    clang = cc or (find_clang(required=False) or [None])[0]
    if clang:
        src = os.path.join(out_dir, "input.cc")
        with open(src, "w") as f:
            f.write(code)
        r = subprocess.run([clang, "-S", "-emit-llvm", "-O2", "-o", output, src]
                           + list(options or []), capture_output=True, text=True)
        if r.returncode != 0:
            raise BuildError(format_error("create_llvm", f"clang failed: {r.stderr[:2000]}",
                                          "source that compiles"))
        with open(output) as f:
            return f.read()
    base = os.path.splitext(os.path.basename(output))[0]
    lib = compile_c(code, out_dir, base)
    text = (f"; C source compiled with the system C compiler (no clang found)\n"
            f"{SHARED_LIBRARY_TAG}{lib}\n")
    with open(output, "w") as f:
        f.write(text)
    return text
