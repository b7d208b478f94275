"""``lanehouse consume --replicas N``: a small supervisor for a local consumer fleet.

N child processes run the same ``consume`` command line (without ``--replicas``); being one
Kafka group, they split the partitions between them. The supervisor

- starts the children in their own process groups, so a terminal's Ctrl-C reaches the
  supervisor only and each child sees exactly the signals forwarded to it; on Linux a child gets
  SIGTERM (a graceful drain) if the supervisor dies, so no orphan keeps partitions;
- forwards every SIGINT/SIGTERM to every child: the first one drains each child, a second one
  makes them exit at once (status 130), as for a single ``consume``;
- prefixes every output line with ``[replica I]`` (stdout to stdout, stderr to stderr) and sets
  ``LANEHOUSE_REPLICA=I`` / ``LANEHOUSE_REPLICAS=N`` in each child's environment;
- fails fast: when a child exits non-zero (an engine stop such as the dead-letter safety valve,
  a crash, an OOM kill), the others are stopped gracefully and the supervisor exits non-zero
  naming the replica. It does not restart the child: a deterministic failure would only move to
  the replica that inherits the partitions, and restart policy (with backoff) belongs to the
  process manager that runs the whole command (systemd, Kubernetes, ...), as Kafka Streams'
  default ``SHUTDOWN_CLIENT`` also leaves it;
- exits with the failed replica's status if one failed, else with the worst child status (a
  child killed by signal S counts as 128 + S): 0 when every replica drained.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO

import typer
from typer.core import TyperArgument, TyperOption

from consumers import PulsarSourceSpec, WorkloadSpec
from consumers.config.replicas import replica_problem
from orchestration.console import print_error

log = logging.getLogger("lanehouse.replicas")

_POLL = 0.05  # seconds between checks of the children
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def fleet_problems(specs: Sequence[WorkloadSpec]) -> list[str]:
    """Why these workloads cannot run as several processes (Pulsar subscriptions only: Kafka
    groups split partitions safely)."""
    problems = []
    for spec in specs:
        source = spec.source
        if not spec.enabled or not isinstance(source, PulsarSourceSpec):
            continue
        problem = replica_problem(source.subscription_type, spec.ordering)
        if problem is not None:
            problems.append(f"workload {spec.name!r}: {problem}")
    return problems


def child_args(ctx: typer.Context, skip: Collection[str]) -> list[str]:
    """The command line that produced ``ctx``, rebuilt from its parsed parameters without the
    ones in ``skip``, so options added to a command later pass through unchanged.

    Only values given explicitly (command line or environment) are repeated; the child computes
    defaults itself. Arguments come after ``--`` so a path starting with ``-`` stays a path.
    """
    options: list[str] = []
    arguments: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if name is None or name in skip:
            continue
        source = ctx.get_parameter_source(name)
        value = ctx.params.get(name)
        if source is None or source.name.startswith("DEFAULT") or value is None:
            continue
        if isinstance(param, TyperArgument):
            values = value if isinstance(value, list | tuple) else [value]
            arguments += [_text(v) for v in values]
        elif isinstance(param, TyperOption):
            if param.count:
                options += [param.opts[0]] * int(value)
            elif param.is_flag:
                flags = param.opts if value else param.secondary_opts
                options += flags[:1]
            else:
                for v in value if param.multiple else [value]:
                    options += [param.opts[0], _text(v)]
    return [*options, "--", *arguments]


def _text(value: object) -> str:
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


def run_fleet(
    specs: Sequence[WorkloadSpec], replicas: int, args: Sequence[str], metrics_port: int | None
) -> int:
    """Run ``replicas`` children of ``lanehouse consume ARGS``; the exit status for the CLI.

    Child I gets ``--metrics-port metrics_port + I`` when a metrics port is given. The CLI
    option bounds ``replicas`` (1..64).
    """
    if metrics_port is not None and metrics_port + replicas - 1 > 65535:
        raise typer.BadParameter(
            f"{replicas} replicas need ports {metrics_port}..{metrics_port + replicas - 1}",
            param_hint="'--metrics-port'",
        )
    problems = fleet_problems(specs)
    if problems:
        print_error("cannot run replicas: " + "; ".join(problems))
        return 2
    base = [sys.executable, "-m", "orchestration.cli", "consume"]
    commands = []
    for i in range(replicas):
        port = [] if metrics_port is None else ["--metrics-port", str(metrics_port + i)]
        commands.append([*base, *port, *args])
    return supervise(commands)


@dataclass
class _Child:
    index: int
    proc: subprocess.Popen[str]
    status: int | None = None
    pumps: list[threading.Thread] = field(default_factory=list)


def supervise(commands: Sequence[Sequence[str]], poll: float = _POLL) -> int:
    """Run one child per command (child I is replica I) until all exit; see the module doc."""
    pending: list[int] = []  # signals received, forwarded by the loop below (not in the handler,
    # which could run between a fork and the child's registration and miss that child)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    children: list[_Child] = []
    stopping = False  # a signal arrived or a replica failed: the others are draining
    failure: int | None = None  # the status of the replica whose failure stopped the fleet
    try:
        # Every child is forked before any output thread exists (fork + threads do not mix).
        for index, command in enumerate(commands):
            if pending:
                break
            children.append(_Child(index, _spawn(command, index, len(commands))))
        lock = threading.Lock()
        for child in children:
            log.info("replica %d: pid %d", child.index, child.proc.pid)
            for pipe, out in ((child.proc.stdout, sys.stdout), (child.proc.stderr, sys.stderr)):
                pump = threading.Thread(
                    target=_pump,
                    args=(pipe, out, f"[replica {child.index}] ", lock),
                    name=f"replica-{child.index}-output",
                    daemon=True,
                )
                pump.start()
                child.pumps.append(pump)
        while any(child.status is None for child in children):
            while pending:
                stopping = True
                _send(children, pending.pop(0))
            for child in children:
                if child.status is not None or (code := child.proc.poll()) is None:
                    continue
                child.status = code
                if code != 0 and not stopping:
                    stopping, failure = True, _exit_status(code)
                    print_error(
                        f"replica {child.index} (pid {child.proc.pid}) {_describe(code)}; "
                        "stopping the other replicas (they drain and commit)"
                    )
                    _send(children, signal.SIGTERM)
            time.sleep(poll)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for child in children:  # only after an error in this function: never leave orphans
            if child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
    for child in children:
        for pump in child.pumps:
            pump.join(timeout=5)
    if failure is not None:  # the cause, not what stopping the others did to them
        return failure
    return max((_exit_status(child.status) for child in children), default=0)


def _spawn(command: Sequence[str], index: int, replicas: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "LANEHOUSE_REPLICA": str(index),
        "LANEHOUSE_REPLICAS": str(replicas),
        "PYTHONUNBUFFERED": "1",  # lines reach the supervisor as they are written
    }
    return subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        process_group=0,
        preexec_fn=_die_with_parent(os.getpid()),
    )


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when the supervisor dies."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before the hook ran
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def _send(children: Sequence[_Child], signum: int) -> None:
    for child in children:
        if child.proc.poll() is None:
            child.proc.send_signal(signum)


def _pump(pipe: IO[str] | None, out: IO[str], prefix: str, lock: threading.Lock) -> None:
    """Copy a child's lines to ``out`` with the replica's prefix; keep reading even when
    ``out`` is gone, so the child never blocks on a full pipe."""
    if pipe is None:
        return
    for line in pipe:
        with lock:
            try:
                out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                out.flush()
            except (OSError, ValueError):
                pass
    pipe.close()


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _exit_status(code: int | None) -> int:
    """A child's status as a shell reports it (128 + S when killed by signal S)."""
    if code is None:
        return 1
    return 128 - code if code < 0 else code
