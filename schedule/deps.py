"""Dependences and legality (filled in below)."""

from __future__ import annotations


def check_legality(model) -> None:
    return None
