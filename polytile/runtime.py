"""``polytile.runtime``: loading exported functions (TVM's ``tvm.runtime.load_module``).

``f.export_library(path)`` writes a built function; ``load_module(path)`` gives back a
callable module, checked like the original:

- ``.so`` (built for ``llvm``): a shared library with a C ABI that runs without polytile
  (its signature and embedded metadata: :mod:`polytile.targets.llvm.library`); the loaded
  module takes numpy arrays.
- ``.cubin`` (built for ``cuda``): the compiled kernels, with their launch plan in
  ``<path>.json`` beside them (:mod:`polytile.targets.cuda.library`); the loaded module
  takes device arrays and launches the kernels through the driver.

Both have ``entry_name``, ``mod[entry_name]``, ``time_evaluator`` and ``metadata``.
"""

from __future__ import annotations

import os

from polytile.errors import format_error


def load_module(path: str | os.PathLike):
    """Load a function written by ``export_library``; the suffix picks the loader.

    Raises
    ------
    FileNotFoundError
        If ``path`` (or a cubin's ``.json`` metadata) does not exist.
    ValueError
        Another suffix, or a file without polytile's metadata.
    OSError
        The shared library cannot be loaded.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(format_error("load_module", f"no file {path!r}",
                                             "expected a file written by export_library"))
    suffix = os.path.splitext(path)[1]
    if suffix == ".so":
        from polytile.targets.llvm.library import load_library

        return load_library(path)
    if suffix == ".cubin":
        from polytile.targets.cuda.library import load_cubin

        return load_cubin(path)
    raise ValueError(format_error("load_module", f"cannot load {os.path.basename(path)!r}",
                                  "expected a '.so' (llvm) or a '.cubin' (cuda) written by "
                                  "export_library"))


__all__ = ["load_module"]
