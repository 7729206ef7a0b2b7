"""The tombstone condition of an attached log, as the readers evaluate it without Spark: parsed by pyiceberg's
expression parser and bound to the source's schema (docs/attaching.md#layouts-and-the-column-mapping). The
compaction run evaluates the same text with Spark SQL; the forms the readers take read the same in both. A rule in
any other Spark SQL form is kept: compaction and ``compactor read`` (which then runs on Spark) evaluate it, and the
readers refuse it with an error naming the forms they take."""

from __future__ import annotations

from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema

from compactor.attach.mapping import AttachError

CONDITION_FORMS = ("comparisons of a column with a literal (=, !=, <>, <, <=, >, >=), IN (...), IS [NOT] NULL, "
                   "LIKE 'prefix%', combined with AND, OR, NOT and parentheses")


def readers_can_evaluate(text: str) -> bool:
    """Whether the tombstone condition ``text`` is of ``CONDITION_FORMS`` (any other Spark SQL condition is still a
    valid rule: compaction and ``compactor read`` evaluate it with Spark, but the readers cannot)."""
    try:
        parse(text)
    except Exception:  # pyparsing's ParseException and friends
        return False
    return True


def check_condition(text: str, schema: Schema, source: str) -> BooleanExpression:
    """The tombstone condition ``text`` bound to ``schema``; ``AttachError`` naming it if the readers cannot
    evaluate it (not in ``CONDITION_FORMS``, or naming a column the source lacks)."""
    try:
        parsed = parse(text)
    except Exception as exc:  # pyparsing's ParseException and friends
        raise AttachError(f"the tombstone rule {text!r} of {source} cannot be evaluated by the readers, TableView "
                          f"and consumers (which run without Spark; compaction and `compactor read` evaluate it with "
                          f"Spark): they need {CONDITION_FORMS}; a boolean column is written 'flag = true' "
                          f"({str(exc).splitlines()[0]})") from None
    try:
        return bind(schema, parsed, case_sensitive=False)
    except Exception as exc:  # pyiceberg's ValueError for an unknown column or a literal of the wrong type
        raise AttachError(f"the tombstone rule {text!r} of {source} does not apply to the source: "
                          f"{str(exc).splitlines()[0]}") from None


__all__ = ["CONDITION_FORMS", "check_condition", "readers_can_evaluate"]
