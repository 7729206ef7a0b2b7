"""Typed builders for the pyiceberg row filters the product uses (partition and offset ranges).

pyiceberg's predicates are pydantic models whose generated signatures type checkers misread; building them
here, by keyword, keeps every other module typed and gives one definition of "offsets [lo, hi) of p".
"""

from __future__ import annotations

from collections.abc import Mapping

from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    LessThan,
    Or,
    Reference,
)

from compactor.schema import OFFSET, PARTITION


def equal(column: str, value: int) -> BooleanExpression:
    return EqualTo(term=Reference(column), value=value)


def at_least(column: str, value: int) -> BooleanExpression:
    return GreaterThanOrEqual(term=Reference(column), value=value)


def below(column: str, value: int) -> BooleanExpression:
    return LessThan(term=Reference(column), value=value)


def partition_range(partition: int, lo: int, hi: int) -> BooleanExpression:
    """Rows of ``partition`` with ``lo <= offset < hi``."""
    return And(equal(PARTITION, partition), And(at_least(OFFSET, lo), below(OFFSET, hi)))


def ranges(per_partition: Mapping[int, tuple[int, int]]) -> BooleanExpression:
    """Rows of partition ``p`` with ``lo <= offset < hi`` for each ``p: (lo, hi)``; empty ranges are skipped."""
    terms = [partition_range(p, lo, hi) for p, (lo, hi) in sorted(per_partition.items()) if hi > lo]
    if not terms:
        return AlwaysFalse()
    return terms[0] if len(terms) == 1 else Or(*terms)
