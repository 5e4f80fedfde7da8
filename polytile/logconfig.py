"""``POLYTILE_LOG``: the one environment variable polytile reads.

``POLYTILE_LOG=debug`` logs each lowering phase and its time to stderr, ``info`` less,
``trace`` also each phase's output (the text ``lower(..., dump=True)`` prints). It applies
to library use (read when ``polytile`` is imported) and to the command line alike.
"""

from __future__ import annotations

import logging
import os
import sys

#: level below DEBUG at which the pipeline logs each phase's output
TRACE = logging.DEBUG - 1

_handler: logging.Handler | None = None


def level_from_env() -> int | None:
    """The logging level ``POLYTILE_LOG`` names, or None when it is unset or empty.

    Raises
    ------
    ValueError
        For a value other than trace, debug, info, warning or error (any case).
    """
    text = os.environ.get("POLYTILE_LOG", "").strip().lower()
    if not text:
        return None
    num = TRACE if text == "trace" else getattr(logging, text.upper(), None)
    if text not in ("trace", "debug", "info", "warning", "error") or not isinstance(num, int):
        raise ValueError(f"POLYTILE_LOG={text!r}: expected trace, debug, info, warning or error")
    return num


def configure(level: int) -> None:
    """Send the ``polytile`` loggers' records at ``level`` and above to stderr (once)."""
    global _handler
    root = logging.getLogger("polytile")
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(_handler)
    root.setLevel(level)
