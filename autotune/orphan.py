"""Helper processes of the tuner (build workers, the GPU runner, anchors) end when the
tuner does.

Each helper serves a connection and ends at its end of file, but only once it reads it: a
helper busy in a build that hangs, or a GPU runner waiting on a kernel that never ends,
outlives a tuner killed by a signal (``timeout``, SIGKILL: no ``close`` runs) and keeps
the CPU or the GPU. :func:`exit_with_parent` starts a daemon thread that ends the process
once it has been re-parented (its parent died), whatever its main thread is doing."""

from __future__ import annotations

import os
import threading
import time

#: the exit status of a helper ended by :func:`exit_with_parent`
ORPHAN_EXIT = 4


def exit_with_parent(poll_s: float = 0.5) -> threading.Thread:
    """Start a daemon thread that calls ``os._exit(ORPHAN_EXIT)`` within ``poll_s``
    seconds of this process's parent dying (its parent id changes when it is re-parented
    to init or a subreaper); returns the thread."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(ORPHAN_EXIT)

    t = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    t.start()
    return t
