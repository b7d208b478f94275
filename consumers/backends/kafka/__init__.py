"""confluent-kafka behind the broker contract: the consumer and the workload's `Backend`
(`consumer.py`), the producer of outputs and dead letters (`producer.py`), a reader of one record
per partition at a position (`reader.py`)."""
