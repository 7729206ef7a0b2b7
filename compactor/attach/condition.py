"""The tombstone condition of an attached log, as the readers evaluate it without Spark: parsed by pyiceberg's
expression parser and bound to the source's schema (docs/attaching.md#layouts-and-the-column-mapping). The
compaction run evaluates the same text with Spark SQL; the forms allowed read the same in both."""

from __future__ import annotations

from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema

from compactor.attach.mapping import AttachError

CONDITION_FORMS = ("comparisons of a column with a literal (=, !=, <>, <, <=, >, >=), IN (...), IS [NOT] NULL, "
                   "LIKE 'prefix%', combined with AND, OR, NOT and parentheses")


def check_condition(text: str, schema: Schema, source: str) -> BooleanExpression:
    """The tombstone condition ``text`` bound to ``schema``; ``AttachError`` naming it if the readers cannot
    evaluate it (not in ``CONDITION_FORMS``, or naming a column the source lacks)."""
    try:
        parsed = parse(text)
    except Exception as exc:  # pyparsing's ParseException and friends
        raise AttachError(f"the tombstone rule {text!r} of {source} cannot be evaluated by the readers (which run "
                          f"without Spark): use {CONDITION_FORMS}; a boolean column is written 'flag = true' "
                          f"({str(exc).splitlines()[0]})") from None
    try:
        return bind(schema, parsed, case_sensitive=False)
    except Exception as exc:  # pyiceberg's ValueError for an unknown column or a literal of the wrong type
        raise AttachError(f"the tombstone rule {text!r} of {source} does not apply to the source: "
                          f"{str(exc).splitlines()[0]}") from None


__all__ = ["CONDITION_FORMS", "check_condition"]
