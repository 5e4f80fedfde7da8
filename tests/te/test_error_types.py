"""Every user error of ``te`` is a ``PolytileError`` that is also the built-in exception it
stands for (as ``ScheduleError`` is a ``ValueError``)."""

from __future__ import annotations

import pytest

from polytile import te
from polytile.errors import (DefinitionError, DefinitionIndexError, DefinitionOverflowError,
                             DefinitionTypeError, DefinitionValueError,
                             DefinitionZeroDivisionError, PolytileError)

A = te.placeholder((4, 5), name="A", dtype="float32")
I = te.placeholder((4,), name="I", dtype="int32")


@pytest.mark.parametrize("make,kind,builtin,match", [
    (lambda: bool(A[0, 0] > 1.0), DefinitionTypeError, TypeError, "has no truth value"),
    (lambda: te.placeholder((3, -1), name="X"), DefinitionValueError, ValueError,
     "dimension 1 is -1"),
    (lambda: te.placeholder((3, "n"), name="X"), DefinitionTypeError, TypeError,
     "dimension 1"),
    (lambda: te.const(300, "int8"), DefinitionOverflowError, OverflowError,
     "does not fit in int8"),
    (lambda: te.floordiv(I[0], 0), DefinitionZeroDivisionError, ZeroDivisionError,
     "division by the constant 0"),
    (lambda: A[0] + 1.0, DefinitionIndexError, IndexError, "got 1 indices"),
    (lambda: te.exp(I[0]), DefinitionTypeError, TypeError, "expected a float"),
    (lambda: te.reduce_axis((5, 2), name="k"), DefinitionValueError, ValueError, "reversed"),
    (lambda: te.placeholder((2,), dtype="float31"), DefinitionTypeError, TypeError,
     "unsupported dtype 'float31'"),
])
def test_te_errors_are_polytile_errors_and_builtins(make, kind, builtin, match):
    with pytest.raises(kind, match=match) as info:
        make()
    assert isinstance(info.value, PolytileError) and isinstance(info.value, DefinitionError)
    assert isinstance(info.value, builtin)
