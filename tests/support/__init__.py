"""Helpers the tests share: brokers and processes to start, handlers and recordings, Dagster
definitions for the platform tests. No test lives here."""
