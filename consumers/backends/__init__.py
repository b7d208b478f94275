"""Broker backends behind one client contract (see ``consumers.source.ConsumerLike``)."""
