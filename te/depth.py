"""How deeply an expression may nest, and the recursion budget of the passes that walk it.

Most passes (mutators, the simplifier, printers, code generators, the interpreter) recurse
once per level of an expression, and a long chain such as ``sum([A[t] for t in range(T)])``
(Python's ``sum`` builds ``((A[0] + A[1]) + A[2]) + ...``) is ``T`` levels deep: past about
330 levels Python's default limit of 1000 frames is exhausted. polytile accepts expressions
up to :data:`MAX_DEPTH` levels:

* ``te.compute`` refuses a deeper body with a :class:`~polytile.errors.LoweringError` that
  names the stage and the depth (``lower`` does the same for a body that ``compute_inline``
  made deeper);
* every public entry point that walks expressions (``rfactor``, ``cache_read``,
  ``cache_write``, ``lower``, ``build``, the interpreter, printing, feature extraction) runs
  under :func:`deep_recursion`, which raises the interpreter's recursion limit to
  :data:`FRAMES` for its duration (a few frames per level) and turns a ``RecursionError``
  into a ``LoweringError``. Generic walks (``collect``, ``post_order_visit``) are
  iterative and need no budget.

The same entry points pause Python's cyclic garbage collector for their duration (shared
like the limit; it runs again after the last of them, if it ran before): lowering creates
hundreds of thousands of short-lived, acyclic IR nodes, and the collections they trigger,
each walking every tracked object of the process, took about a fifth of a GPU kernel's
lowering. Reference counting still frees every node as soon as it is unused.

Since CPython 3.11 a call from Python code to Python code does not use the C stack, so the
raised limit is safe on the default thread stack (depth 10,000 runs within 1 MiB); on 3.10
every frame uses the C stack, so the depth allowed there is smaller. Printers recurse
through plain methods, never through ``__call__`` or ``str()`` (a C-level re-entry).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import sys
import threading

from polytile.errors import LoweringError, format_error

from .expr import Expr, child_fields

#: the deepest expression polytile lowers, builds and prints (levels of nested operations;
#: a Python sum of n tensor reads is n + 2 deep): 12,000, or 1,500 before CPython 3.11
MAX_DEPTH = 12_000 if sys.version_info >= (3, 11) else 1_500
#: the recursion limit of polytile's passes: at most ~4 frames per level, plus the caller's
FRAMES = 6 * MAX_DEPTH + 5_000

_HINT = ("reduce over a te.reduce_axis (te.sum(A[k], axis=k) instead of a Python sum of "
         "terms), or split the expression into intermediate computes")

_lock = threading.Lock()
_users = 0
_saved = 0
_gc_was_enabled = False


def expr_depth(e: Expr) -> int:
    """Levels of nested operations in ``e`` (a leaf is 1). Iterative, shared nodes once."""
    depth: dict[int, int] = {}
    stack = [(e, False)]
    while stack:
        x, expanded = stack.pop()
        if id(x) in depth:
            continue
        kids = []
        for f in child_fields(x):
            v = getattr(x, f)
            kids += [c for c in (v if isinstance(v, tuple) else (v,)) if isinstance(c, Expr)]
        if expanded:
            depth[id(x)] = 1 + max((depth[id(c)] for c in kids), default=0)
            continue
        stack.append((x, True))
        stack.extend((c, False) for c in kids if id(c) not in depth)
    return depth[id(e)]


def check_depth(e: Expr, who: str, stage: str, after: str = "") -> None:
    """Refuse ``e`` (the body of ``stage``) when it nests deeper than :data:`MAX_DEPTH`.

    Raises
    ------
    LoweringError
        Naming ``who`` (the primitive), the stage and the depth, with a hint.
    """
    d = expr_depth(e)
    if d > MAX_DEPTH:
        raise LoweringError(format_error(
            who, f"the body of stage {stage!r} is {d} operations deep{after}",
            f"polytile handles expressions up to {MAX_DEPTH} levels of nested operations",
            hint=_HINT))


@contextlib.contextmanager
def deep_recursion(who: str):
    """Run a pass over expressions of up to :data:`MAX_DEPTH` levels: the recursion limit is
    at least :data:`FRAMES` inside (shared by concurrent users, restored by the last one),
    the cyclic garbage collector is paused (see the module docstring), and a
    ``RecursionError`` leaves as a ``LoweringError`` naming ``who``."""
    global _users, _saved, _gc_was_enabled
    with _lock:
        if _users == 0:
            _saved = sys.getrecursionlimit()
            if _saved < FRAMES:
                sys.setrecursionlimit(FRAMES)
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _users += 1
    try:
        yield
    except RecursionError:
        raise LoweringError(format_error(
            who, "an expression nests too deeply to be processed",
            f"polytile handles expressions up to {MAX_DEPTH} levels of nested operations",
            hint=_HINT)) from None
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and sys.getrecursionlimit() == FRAMES and _saved < FRAMES:
                sys.setrecursionlimit(_saved)
            if _users == 0 and _gc_was_enabled:
                gc.enable()


def deep(who: str):
    """Decorator: run the function under :func:`deep_recursion` (``who`` names it)."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with deep_recursion(who):
                return fn(*args, **kwargs)

        return run

    return wrap
