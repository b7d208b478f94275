"""One request to a Dagster webserver's GraphQL API (what ``lanehouse up``, backfills from the
command line and the discovery sensor's code-location reload use)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from consumers import LanehouseError


def graphql(
    ui_url: str, query: str, variables: dict[str, Any] | None = None, timeout: float = 30
) -> dict[str, Any]:
    """The response's ``data``; :class:`LanehouseError` on a GraphQL error."""
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"{ui_url}/graphql", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        payload = json.loads(reply.read())
    if payload.get("errors"):
        raise LanehouseError(f"Dagster GraphQL error: {payload['errors'][0].get('message')}")
    data: dict[str, Any] = payload["data"]
    return data
