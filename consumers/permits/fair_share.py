"""Weighted max-min fair division of whole permits among claimants capped by their demand.

Water-filling: every claimant with demand gets the same permits per unit of weight, except that
nobody gets more than it asked for; what a satisfied claimant leaves is divided among the rest
(work-conserving). Fractions are rounded so the parts add up exactly, largest remainders first,
ties broken by key so every process computes the same answer from the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def fair_shares(total: int, demands: Mapping[K, int], weights: Mapping[K, float]) -> dict[K, int]:
    """Split ``total`` among ``demands`` (keys need a weight > 0); returns a part for every key."""
    shares = dict.fromkeys(demands, 0.0)
    open_ = {k for k, d in demands.items() if d > 0}
    left = float(max(total, 0))
    while open_ and left > 1e-9:
        level = left / sum(weights[k] for k in open_)
        full = {k for k in open_ if demands[k] - shares[k] <= level * weights[k]}
        if not full:
            for k in open_:
                shares[k] += level * weights[k]
            break
        for k in full:
            left -= demands[k] - shares[k]
            shares[k] = float(demands[k])
        open_ -= full
    return _round(shares, demands, min(max(total, 0), sum(max(d, 0) for d in demands.values())))


def _round(shares: dict[K, float], demands: Mapping[K, int], total: int) -> dict[K, int]:
    parts = {k: min(math.floor(v + 1e-9), demands[k]) for k, v in shares.items()}
    short = total - sum(parts.values())
    by_remainder = sorted(shares, key=lambda k: (-(shares[k] - parts[k]), repr(k)))
    for k in by_remainder:
        if short <= 0:
            break
        if parts[k] < demands[k]:
            parts[k] += 1
            short -= 1
    return parts
