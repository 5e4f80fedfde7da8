"""``tempdir()`` (TVM's ``tvm.contrib.utils.tempdir``): a temporary directory."""

from __future__ import annotations

import os
import shutil
import tempfile


class TempDirectory:
    """A temporary directory, removed when the object is collected (or by ``remove()``).
    ``relpath(name)`` is the path of ``name`` inside it."""

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool = False):
        if custom_path:
            os.makedirs(custom_path, exist_ok=True)
            self.temp_dir = custom_path
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="polytile_")
        self._keep = keep_for_debug or bool(custom_path)

    def relpath(self, name: str) -> str:
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list[str]:
        return os.listdir(self.temp_dir)

    def remove(self) -> None:
        if not self._keep and os.path.isdir(self.temp_dir):
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def tempdir(custom_path: str | None = None, keep_for_debug: bool = False) -> TempDirectory:
    """A new temporary directory (see :class:`TempDirectory`)."""
    return TempDirectory(custom_path, keep_for_debug)
