"""pulsar-client behind the broker contract: the client's settings (``client.py``), the consumer
and the workload's Backend (``consumer.py``), the producer (``producer.py``) and the
acknowledgement probe operators and tests use (``probe.py``)."""
