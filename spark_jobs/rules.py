"""What makes a click or an order valid, and how a valid one is typed.

Why apart from ``cleaning``: that module is the mechanism (dedupe, quarantine, reconcile) and
is the same for every stream; this one is the domain, the part that changes when a field is
added. The field checks themselves are ``spark_jobs.validation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from spark_jobs import validation as v
from spark_jobs.schemas import CLICK_SCHEMA, ORDER_ITEM_TYPE, ORDER_SCHEMA, PRICE_TYPE, TOTAL_TYPE

EVENT_TYPES: Final = ("page_view", "add_to_cart", "purchase")
#: Revenue adds totals up, which only makes sense in one currency.
CURRENCIES: Final = ("EUR",)
TOTAL_TOLERANCE: Final = 0.01
#: The column holding the parsed value (a VARIANT) that ``inspect`` reads.
VARIANT: Final = "_variant"
_ITEMS_TYPE: Final = ArrayType(ORDER_ITEM_TYPE).simpleString()


@dataclass(frozen=True)
class StreamRules:
    """How one stream is checked and typed.

    Functions, not columns: a ``Column`` can only be built once a SparkSession exists.
    ``inspect`` adds the staged helper columns (``_f_<field>`` structs, see
    ``validation.inspect``) that ``problems`` and ``columns`` then read.
    """

    stream: str
    id_column: str
    schema: StructType
    inspect: Callable[[DataFrame], DataFrame]
    problems: Callable[[], Column]  # array<string>, empty for a valid row
    columns: Callable[[], list[Column]]


def _inspected(name: str) -> Column:
    return F.col(f"_f_{name}")


def _with_inspected(frame: DataFrame, fields: list[v.Field]) -> DataFrame:
    variant = F.col(VARIANT)
    return frame.withColumns({f"_f_{f.name}": v.inspect(variant, f) for f in fields})


def _problems(fields: list[v.Field]) -> list[Column]:
    return [v.problem(_inspected(f.name), f) for f in fields]


def _click_problems() -> Column:
    return v.collected(_problems(_click_fields()))


def _click_fields() -> list[v.Field]:
    priced = F.coalesce(
        _inspected("event_type")["value"].isin("add_to_cart", "purchase"), F.lit(False)
    )
    return [
        v.Field("event_id", "string", "string"),
        v.Field("user_id", "string", "string"),
        v.Field("event_type", "string", "string", allowed=EVENT_TYPES),
        v.Field("product_id", "string", "string"),
        v.Field("price", "number", PRICE_TYPE.simpleString(), required=priced, minimum=0),
        v.Field("quantity", "integer", "int", required=priced, minimum=1),
        v.Field("ts", "timestamp", "timestamp"),
    ]


def _click_columns() -> list[Column]:
    names = [f.name for f in _click_fields()]
    return [_inspected(n)["value"].alias("event_ts" if n == "ts" else n) for n in names]


CLICKS: Final = StreamRules(
    stream="clicks",
    id_column="event_id",
    schema=CLICK_SCHEMA,
    inspect=lambda frame: _with_inspected(frame, _click_fields()),
    problems=_click_problems,
    columns=_click_columns,
)


def _order_fields() -> list[v.Field]:
    return [
        v.Field("order_id", "string", "string"),
        v.Field("user_id", "string", "string"),
        v.Field("items", "array", "array<variant>"),
        v.Field("total", "number", TOTAL_TYPE.simpleString(), minimum=0),
        v.Field("currency", "string", "string", allowed=CURRENCIES),
        v.Field("ts", "timestamp", "timestamp"),
    ]


def _item_fields() -> list[v.Field]:
    return [
        v.Field("product_id", "string", "string"),
        v.Field("quantity", "integer", "int", minimum=1),
        v.Field("unit_price", "number", PRICE_TYPE.simpleString(), minimum=0),
    ]


def _inspect_orders(frame: DataFrame) -> DataFrame:
    """Stages: the fields; each item's fields; the items' problems, typed items and sum."""
    fields = _item_fields()

    def item(element: Column) -> Column:
        is_object = F.schema_of_variant(element).startswith("OBJECT").alias("is_object")
        return F.struct(is_object, *(v.inspect(element, f).alias(f.name) for f in fields))

    def item_problems(item: Column, index: Column) -> Column:
        prefix = F.concat(F.lit("items["), index.cast("string"), F.lit("]: "))
        not_object = F.when(~item["is_object"], F.concat(prefix, F.lit("must be an object")))
        return v.collected([not_object, *(v.problem(item[f.name], f, prefix) for f in fields)])

    def typed(item: Column) -> Column:
        return F.struct(*(item[f.name]["value"].alias(f.name) for f in fields))

    no_problems = F.array().cast("array<string>")
    staged = _with_inspected(frame, _order_fields()).withColumn(
        "_items", F.transform(_inspected("items")["value"], item)
    )
    return (
        staged.withColumn(
            "_item_problems",
            F.coalesce(F.flatten(F.transform("_items", item_problems)), no_problems),
        )
        .withColumn("_typed_items", F.transform("_items", typed).cast(_ITEMS_TYPE))
        .withColumn("_items_sum", _items_sum(F.col("_typed_items")))
    )


def _order_problems() -> Column:
    items = _inspected("items")["value"]
    empty = F.when(F.size(items) == 0, F.lit("field 'items' is empty"))
    total, items_sum = _inspected("total")["value"], F.col("_items_sum")
    mismatch = F.when(
        (F.size("_item_problems") == 0) & (F.abs(total - items_sum) > TOTAL_TOLERANCE),
        F.concat(
            F.lit("field 'total' "),
            total.cast("string"),
            F.lit(" does not match the sum of its items "),
            items_sum.cast("string"),
        ),
    )
    return F.concat(
        v.collected([*_problems(_order_fields()), empty]),
        F.col("_item_problems"),
        v.collected([mismatch]),
    )


def _items_sum(items: Column) -> Column:
    """Sum of quantity x unit price, in exact decimals."""
    zero = F.lit(0).cast("decimal(20,2)")
    return F.aggregate(
        items,
        zero,
        lambda acc, item: (acc + item["quantity"] * item["unit_price"]).cast("decimal(20,2)"),
    )


def _order_columns() -> list[Column]:
    return [
        _inspected("order_id")["value"].alias("order_id"),
        _inspected("user_id")["value"].alias("user_id"),
        F.col("_typed_items").alias("items"),
        F.size("_typed_items").alias("item_count"),
        _inspected("total")["value"].alias("total"),
        _inspected("currency")["value"].alias("currency"),
        _inspected("ts")["value"].alias("order_ts"),
    ]


ORDERS: Final = StreamRules(
    stream="orders",
    id_column="order_id",
    schema=ORDER_SCHEMA,
    inspect=_inspect_orders,
    problems=_order_problems,
    columns=_order_columns,
)
