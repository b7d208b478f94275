"""Broker backends behind one client contract (see ``consumers.engine.source.ConsumerLike``)."""
