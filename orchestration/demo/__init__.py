"""The demo shop: its event streams (clicks and orders), producers that write them to Kafka or
Pulsar, the live shop that plays them in real time, and ``lanehouse demo``'s end-to-end run."""
