"""``lanehouse dead-letters list|replay``: a workload's dead letters, shown or republished to its
source topic; Kafka or Pulsar, by the spec's source kind (pulsar-client is imported only for
Pulsar workloads)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from consumers import KafkaSourceSpec, SpecError, WorkloadSpec, load_specs
from consumers.dead_letters.places import list_workload_dead_letters, replay_workload_dead_letters
from consumers.dead_letters.selection import (
    parse_since,
)
from orchestration.cli.params import topic_name
from orchestration.cli.terminal import progress_bar
from orchestration.console import exits_on, print_error
from orchestration.workloads.names import workloads_dir

dead_letters_app = typer.Typer(
    name="dead-letters",
    help="List a workload's dead letters (Kafka or Pulsar), or replay them to its source topic.",
    no_args_is_help=True,
)
_SpecsOption = Annotated[
    Path | None,
    typer.Option(
        "--specs",
        envvar="LANEHOUSE_WORKLOADS",
        show_default=False,
        help="Spec file or directory of *.yaml that defines the workload (default: the "
        "repository's workloads/).",
    ),
]
_WorkloadArgument = Annotated[str, typer.Argument(help="Workload name (its spec's `name`).")]
_SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Only dead letters whose last failure is at/after this: a duration ago "
        "('30m', '2h') or an ISO 8601 time ('2024-05-01T12:00:00Z'; UTC without an offset)."
    ),
]
_KEY_CHARS = 32
_MESSAGE_CHARS = 60


def _dead_letter_workload(specs: Path | None, workload: str) -> tuple[WorkloadSpec, str]:
    """The workload's spec and its dead-letter topic; exit 2 if it has none."""
    specs = specs if specs is not None else workloads_dir()
    with exits_on(SpecError, code=2):
        loaded = load_specs([specs], import_handler=False)
    by_name = {spec.name: spec for spec in loaded}
    spec = by_name.get(workload)
    if spec is None:
        found = ", ".join(sorted(by_name)) or "no workloads"
        print_error(f"no workload named {workload!r} in {specs} (found: {found})")
        raise typer.Exit(2)
    if spec.dead_letter is None:
        print_error(
            f"workload {workload!r} has no dead-letter topic: its spec sets no dead_letter "
            "(add `dead_letter: {topic: <name>}`)"
        )
        raise typer.Exit(2)
    return spec, spec.dead_letter.topic


def _target(spec: WorkloadSpec, topic: str, to: str | None) -> str | None:
    """Where replay republishes: ``--to`` (checked), else the one source topic, else ``None``
    (each dead letter's own source topic)."""
    source = spec.source
    if to is not None:
        if isinstance(source, KafkaSourceSpec):
            topic_name(to, "'--to'")
        else:
            try:
                to = source.topic_name(to)  # a Pulsar topic's full name
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="'--to'") from exc
        if to == topic:
            raise typer.BadParameter(f"{to!r} is the dead-letter topic itself", param_hint="'--to'")
        return to
    return source.topics[0] if len(source.topics) == 1 else None


def _since_ms(since: str | None) -> int | None:
    if since is None:
        return None
    try:
        return parse_since(since)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--since'") from exc


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show_key(key: bytes | None) -> str:
    if key is None:
        return "-"
    try:
        text = key.decode()
    except UnicodeDecodeError:
        text = repr(key)
    else:
        text = text if text.isprintable() else repr(key)
    return _shorten(text, _KEY_CHARS)


def _utc(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


@dead_letters_app.command("list")
def dead_letters_list(
    workload: _WorkloadArgument,
    specs: _SpecsOption = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Show at most this many.")] = None,
    since: _SinceOption = None,
) -> None:
    """Show a workload's dead letters (the whole dead-letter topic is read; nothing is committed)."""
    spec, topic = _dead_letter_workload(specs, workload)
    since_ms = _since_ms(since)
    with exits_on():
        entries = list_workload_dead_letters(spec, limit, since_ms)
    console = Console(highlight=False)
    if not entries:
        console.print(Text(f"no dead letters of workload {workload} in {topic}"))
        return
    table = Table(title=Text(f"dead letters of {workload} in {topic}"), title_justify="left")
    for column in ("offset", "key", "source"):
        table.add_column(column, overflow="fold")
    table.add_column("attempts", justify="right")
    table.add_column("replays", justify="right")
    table.add_column("error", overflow="fold")
    table.add_column("message", overflow="fold")
    table.add_column("last failure (UTC)", no_wrap=True)
    for entry in entries:
        info = entry.info
        table.add_row(
            Text(entry.position),
            Text(_show_key(entry.key)),
            Text(f"{info.source_topic}[{info.source_partition}]@{info.source_offset}"),
            Text(str(info.attempts)),
            Text(str(info.replay_count)),
            Text(info.error_type),
            Text(_shorten(info.error_message, _MESSAGE_CHARS)),
            Text(_utc(info.last_failure_ms)),
        )
    console.print(table)
    console.print(Text(f"{len(entries)} dead letters"))


@dead_letters_app.command("replay")
def dead_letters_replay(
    workload: _WorkloadArgument,
    specs: _SpecsOption = None,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Handle at most this many of its dead letters.")
    ] = None,
    since: _SinceOption = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            help="Topic to republish to (default: the workload's source topic; with several, "
            "each dead letter's own source topic).",
        ),
    ] = None,
    max_replays: Annotated[
        int,
        typer.Option(
            min=1, help="Dead letters replayed this many times already are not republished."
        ),
    ] = 3,
) -> None:
    """Republish a workload's dead letters that no earlier replay handled.

    Progress is kept in the consumer group (Kafka) or durable subscription (Pulsar) lanehouse.<workload>.dlq-replay, so a second run republishes nothing twice. Dead letters passed over (older than --since, already replayed --max-replays times, other workloads') are not looked at again by later replays; `list` still shows them.
    """
    spec, topic = _dead_letter_workload(specs, workload)
    since_ms = _since_ms(since)
    target = _target(spec, topic, to)
    progress = progress_bar(transient=True)
    with exits_on(), progress:  # the bar stops before the error line
        task = progress.add_task(escape(f"replay {topic}"), total=None)

        def report(scanned: int, total: int | None) -> None:
            progress.update(task, completed=scanned, total=total)

        summary = replay_workload_dead_letters(spec, target, limit, since_ms, max_replays, report)
    where = target if target is not None else "each dead letter's source topic"
    print(f"replayed {summary.replayed} dead letters of {workload} from {topic} to {where}")
    if summary.exhausted:
        print(
            f"exhausted {summary.exhausted} (replayed {max_replays} times or more already; "
            "not republished, still listed by `dead-letters list`):"
        )
        for entry in summary.exhausted_entries:
            info = entry.info
            print(
                f"  {entry.position} from "
                f"{info.source_topic}[{info.source_partition}]@{info.source_offset} "
                f"replays {info.replay_count}: {info.error_type}: "
                f"{_shorten(info.error_message, _MESSAGE_CHARS)}"
            )
    print(
        f"skipped {summary.skipped_other_workloads} of other workloads, "
        f"{summary.skipped_older} older than --since, {summary.malformed} unreadable"
    )
