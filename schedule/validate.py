"""Schedule checks that need the whole schedule but no isl (filled in below)."""

from __future__ import annotations


def validate_schedule(sch) -> None:
    return None
