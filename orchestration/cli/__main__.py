"""``python -m orchestration.cli``: the ``lanehouse`` command (replicas and ``up`` start their
children this way)."""

from orchestration.cli import app

app()
