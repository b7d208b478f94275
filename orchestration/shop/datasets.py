"""The landed datasets of the shop: its workloads land them, its Spark assets read them.
Without imports, so the demo's producers and the CLI name them without loading Dagster."""

from __future__ import annotations

from typing import Final

CLICKS_DATASET: Final = "clickstream"
ORDERS_DATASET: Final = "orders"
SHOP_DATASETS: Final = (CLICKS_DATASET, ORDERS_DATASET)
