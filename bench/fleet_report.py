"""The fleet bench's report: medians per configuration, each mode's 2/1 ratios, and the table.

A mode is judged on its own 2/1 ratio of committed msg/s (issue 17: >= 1.7x for 2 replicas):
both modes share the broker, the topic and the machine, so a ratio compares like with like
where absolute rates would also measure the load of the moment.
"""

from __future__ import annotations

import statistics
from typing import Any, Final

from bench.engine import fmt

#: Two replicas at least this many times one, on committed msg/s.
GOAL_RATIO: Final = 1.7
#: Table columns: header, key of the medians, format, key of the 2/1 ratio (None: no ratio).
COLUMNS: Final = [
    ("msg/s handled", "msg_s_handled", ",.0f", "ratio_handled"),
    ("msg/s committed", "msg_s_committed", ",.0f", "ratio_committed"),
    ("msg/s wall (with start-up)", "msg_s_wall", ",.0f", "ratio_wall"),
    ("start-up to first record s", "startup_s", ".1f", None),
    ("committed to exited s", "stop_s", ".1f", None),
    ("consumer cores", "consumers_cores", ".2f", None),
    ("broker cores", "broker_cores", ".2f", None),
    ("machine busy", "machine_busy", ".0%", None),
]


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one configuration's float fields; the committed rate of each run; all errors."""
    out: dict[str, Any] = {"mode": runs[0]["mode"], "replicas": runs[0]["replicas"]}
    out["repeats"] = len(runs)
    for key, value in runs[0].items():
        floats = [v for r in runs if isinstance(v := r.get(key), float)]
        if isinstance(value, float) and len(floats) == len(runs):
            out[key] = statistics.median(floats)
    out["msg_s_committed_each"] = [r.get("msg_s_committed") for r in runs]
    out["errors"] = [e for r in runs for e in r["errors"]]
    return out


def mode_report(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's medians with 1 and 2 replicas, its 2/1 ratios, and whether it meets the goal."""
    m1, m2 = median_of(one), median_of(two)
    ratios = {
        f"ratio_{kind}": m2[f"msg_s_{kind}"] / m1[f"msg_s_{kind}"]
        for kind in ("handled", "10_90", "committed", "wall")
        if m1.get(f"msg_s_{kind}") and m2.get(f"msg_s_{kind}")
    }
    committed = ratios.get("ratio_committed")
    return {
        "replicas_1": m1,
        "replicas_2": m2,
        **ratios,
        "goal_met": committed is not None and committed >= GOAL_RATIO,
    }


def table(report: dict[str, Any]) -> str:
    """Markdown: per mode one row per replica count (medians), then its 2/1 row; the verdict."""
    lines = ["| mode | replicas | " + " | ".join(c[0] for c in COLUMNS) + " |"]
    lines.append("|" + "---|" * (len(COLUMNS) + 2))
    for mode in report["modes"]:
        block = report[mode]
        for replicas in (1, 2):
            row = block[f"replicas_{replicas}"]
            cells = [fmt(row.get(key), spec) for _, key, spec, _ in COLUMNS]
            lines.append(f"| {mode} | {replicas} | " + " | ".join(cells) + " |")
        cells = [ratio_cell(block, ratio) for *_, ratio in COLUMNS]
        lines.append(f"| **{mode} 2/1** | | " + " | ".join(cells) + " |")
    verdicts = ", ".join(
        f"{mode} {'met' if report[mode]['goal_met'] else 'NOT met'}" for mode in report["modes"]
    )
    return "\n".join([*lines, "", f"goal 2/1 >= {GOAL_RATIO}x on committed msg/s: {verdicts}"])


def ratio_cell(block: dict[str, Any], key: str | None) -> str:
    if key is None:
        return ""
    value = block.get(key)
    return f"**{value:.2f}x**" if isinstance(value, float) else "n/a"
