"""Consuming workloads under Dagster: the shared names and run tags, the spec registry, the
host job (many workloads in one run) and the consumer job (a run per workload replica, for those
that need a process of their own), the discovery sensor that starts, restarts and stops those
runs (its decisions and cursor apart from Dagster's sensor API), heartbeats, the status the CLI
shows, and the dead-letter replay job."""
