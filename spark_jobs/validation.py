"""Column expressions that say, in words, what is wrong with a raw JSON record (or null if fine).

Why VARIANT rather than ``from_json`` with a typed schema: ``from_json`` turns a missing field,
a JSON ``null`` and a wrong type (``"price": "abc"``) all into the same null, so it cannot say
which happened. ``try_parse_json`` keeps the value as parsed, and ``schema_of_variant`` on
each field tells the JSON type apart, so every reason can name the field and the fault.

Why re-check UTF-8: Spark's cast of binary to string never fails on invalid bytes, it
carries them along; ``is_valid_utf8`` looks at the bytes themselves.

Everything here is a plain Catalyst expression (higher-order functions included): no Python
UDF, so nothing leaves the JVM. Expressions that are read several times are computed once in
a staged column (``inspect``, ``collected``): inlined, a dozen fields' checks outgrow Java's
64 KB method limit and Spark falls back from generated code to the slower interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pyspark.sql import Column
from pyspark.sql import functions as F

FieldKind = Literal["string", "number", "integer", "timestamp", "array"]

_INTEGER_KINDS: Final = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_NUMBER_KINDS: Final = (*_INTEGER_KINDS, "FLOAT", "DOUBLE")
#: ISO-8601 with a zone (``Z`` or an offset): a timestamp without one is ambiguous.
_ISO_TIMESTAMP: Final = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"
_DESCRIPTION: Final[dict[FieldKind, str]] = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "timestamp": "an ISO-8601 timestamp with a zone",
    "array": "an array",
}


@dataclass(frozen=True, eq=False)
class Field:
    """One expected JSON field: its kind, the Spark type it is read as, and its rules.

    ``required`` may be a boolean column, for fields required only on some rows (a click's
    price only on carts and purchases); an optional field may be absent or JSON ``null``.
    """

    name: str
    kind: FieldKind
    spark_type: str
    required: bool | Column = True
    minimum: int | None = None  # numbers below it are rejected
    allowed: tuple[str, ...] | None = None  # the known values of an enumeration


def decoded(value: Column) -> Column:
    """The value as a string (meaningful only where ``is_utf8`` holds)."""
    return value.cast("string")


def is_utf8(value: Column) -> Column:
    return F.is_valid_utf8(decoded(value))


def parsed(value: Column) -> Column:
    """The value parsed as JSON into a VARIANT, null when it is not JSON."""
    return F.try_parse_json(decoded(value))


def structural_problem(value: Column, variant: Column) -> Column:
    """Why the record cannot be read at all, or null: checked before any field."""
    return F.coalesce(
        F.when(value.isNull(), F.lit("value is null")),
        F.when(~is_utf8(value), F.lit("value is not valid UTF-8")),
        F.when(variant.isNull(), F.lit("value is not valid JSON")),
        F.when(
            ~F.schema_of_variant(variant).startswith("OBJECT"),
            F.lit("value is JSON but not an object"),
        ),
    )


def raw_columns(value: Column) -> tuple[Column, Column]:
    """``(raw, raw_encoding)`` for quarantine: readable text when possible, base64 otherwise."""
    utf8 = is_utf8(value)
    raw = F.when(utf8, decoded(value)).otherwise(F.base64(value))
    encoding = F.when(value.isNull(), F.lit(None)).when(utf8, "utf-8").otherwise("base64")
    return raw, encoding


def field_value(obj: Column, name: str) -> Column:
    """The field as a VARIANT: SQL null when absent, a VARIANT null for JSON ``null``."""
    return F.variant_get(obj, f"$.{name}", "variant")


def inspect(obj: Column, field: Field) -> Column:
    """What the checks need of one field, as a struct: ``present``, ``kind``, ``text``, ``value``.

    Staged in its own column because the checks read each value several times (see the module
    docstring). ``value`` is the field read as its Spark type: null when absent, of another
    kind or out of range; ``text`` is the raw string, for timestamps only.
    """
    raw = field_value(obj, field.name)
    text = F.try_variant_get(raw, "$", "string") if field.kind == "timestamp" else F.lit(None)
    return F.struct(
        F.coalesce(raw.isNotNull() & ~F.is_variant_null(raw), F.lit(False)).alias("present"),
        F.schema_of_variant(raw).alias("kind"),
        text.cast("string").alias("text"),
        F.try_variant_get(raw, "$", field.spark_type).alias("value"),
    )


def problem(inspected: Column, field: Field, prefix: Column | None = None) -> Column:
    """The first thing wrong with a field (from ``inspect``) in words, or null.

    ``prefix`` is put before the message, e.g. ``items[2]: `` for the fields of an item.
    """
    present, kind, value = inspected["present"], inspected["kind"], inspected["value"]
    lead = F.lit("") if prefix is None else prefix
    name = f"field '{field.name}'"

    def say(*parts: Column | str) -> Column:
        return F.concat(lead, *(F.lit(p) if isinstance(p, str) else p for p in parts))

    required = F.lit(field.required) if isinstance(field.required, bool) else field.required
    result = F.when(required & ~present, say(f"missing required field '{field.name}'"))
    result = result.when(
        present & ~_kind_ok(field.kind, kind, inspected["text"]),
        say(f"{name} must be {_DESCRIPTION[field.kind]}, got ", F.lower(kind)),
    )
    unreadable = "is not a valid timestamp" if field.kind == "timestamp" else "is out of range"
    result = result.when(present & value.isNull(), say(f"{name} {unreadable}"))
    if field.kind == "string":
        result = result.when(value == "", say(f"{name} is empty"))
    if field.allowed is not None:
        result = result.when(
            ~value.isin(*field.allowed), say(f"unknown {field.name} '", value, "'")
        )
    if field.minimum == 0:
        result = result.when(value < 0, say(f"{name} is negative: ", value.cast("string")))
    elif field.minimum is not None:
        result = result.when(
            value < field.minimum,
            say(f"{name} must be >= {field.minimum}, got ", value.cast("string")),
        )
    return result


def collected(problems: Sequence[Column]) -> Column:
    """The non-null problems as an ``array<string>``, empty when there are none."""
    return F.array_compact(F.array(*problems))


def reason(structural: Column, problems: Column) -> Column:
    """The structural problem, else the field ``problems`` (an array) ``; ``-joined, else null.

    ``problems`` should be a staged column: it is read twice here.
    """
    joined = F.when(F.size(problems) > 0, F.array_join(problems, "; "))
    return F.coalesce(structural, joined)


def _kind_ok(kind: FieldKind, variant_kind: Column, text: Column) -> Column:
    if kind == "string":
        return variant_kind == "STRING"
    if kind == "integer":
        return variant_kind.isin(*_INTEGER_KINDS)
    if kind == "number":
        return variant_kind.isin(*_NUMBER_KINDS) | variant_kind.startswith("DECIMAL")
    if kind == "array":
        return variant_kind.startswith("ARRAY")
    return (variant_kind == "STRING") & text.rlike(_ISO_TIMESTAMP)
