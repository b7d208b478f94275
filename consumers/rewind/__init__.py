"""Moving a workload's position back (or forward) to a point in time: what ``lanehouse workloads
rewind`` and the ``rewind`` job do to the broker and to the lake."""
