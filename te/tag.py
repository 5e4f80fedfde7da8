"""``te.tag_scope`` (TVM's): a tag for every ``te.compute`` defined inside it.

Used as ``with te.tag_scope(tag="gemm"): C = te.compute(...)`` or as a decorator of a
function that builds computes (``@te.tag_scope(tag="conv")``). Scopes do not nest, and a
compute inside one may not give a tag of its own (both are ``ValueError``, as in TVM).
"""

from __future__ import annotations

import functools

from polytile.errors import DefinitionValueError, format_error

_CURRENT: list = []   # the scope in force (at most one)


class tag_scope:  # noqa: N801 (TVM's name)
    """Give ``tag`` to every compute defined while the scope is entered.

    Parameters
    ----------
    tag : str

    Raises
    ------
    DefinitionValueError
        Entering a scope inside another.
    """

    def __init__(self, tag: str):
        self.tag = str(tag)

    def __enter__(self) -> "tag_scope":
        if _CURRENT:
            raise DefinitionValueError(format_error(
                "tag_scope", f"tag_scope({self.tag!r}) entered inside "
                f"tag_scope({_CURRENT[-1].tag!r})", "scopes that do not nest (TVM's rule)"))
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def tagged(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return tagged


def current_tag(tag: str, who: str) -> str:
    """The tag of a compute given ``tag``: the scope's when one is in force.

    Raises
    ------
    DefinitionValueError
        For a compute that gives a tag of its own inside a scope.
    """
    if not _CURRENT:
        return tag
    if tag:
        raise DefinitionValueError(format_error(
            who, f"tag {tag!r} given inside tag_scope({_CURRENT[-1].tag!r})",
            "one of them (TVM: policy conflict)"))
    return _CURRENT[-1].tag
