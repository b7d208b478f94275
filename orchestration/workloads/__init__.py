"""Consuming workloads under Dagster: the shared names and run tags, the spec registry, the
consumer job (one run per workload), the discovery sensor that starts, restarts and stops those
runs (its decisions and cursor apart from Dagster's sensor API), heartbeats, the status the CLI
shows, and the dead-letter replay job."""
