"""The platform on one machine, without Dagster-managed infrastructure: ``lanehouse up``
(embedded brokers, demo producers, a Dagster webserver and daemon as child processes), the local
Dagster instance and state directories, and the ``consume --replicas`` supervisor. Dagster runs
here as processes: no module imports it at import time (``up`` opens the instance once, to tag
the runs it stops)."""
