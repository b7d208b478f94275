"""Names that become file paths, consumer groups, metric labels and topics: one rule each.

A workload's or pool's name ends up in paths and URLs, so it is checked where it enters (the
spec, the HTTP API) against the same pattern. Kafka topic names are checked before a request
reaches a broker: Tansu accepts names Kafka would reject (``bad/..``), and a name with a ``/``
would otherwise become a path on the broker's disk.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator

#: Workload and pool names: what the spec allows and the HTTP API looks up.
NAME: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")

_TOPIC_CHARS: Final = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_MAX_LEN: Final = 249
_TOPIC_RULE: Final = (
    "a Kafka topic name is 1-249 ASCII letters, digits, '.', '_' or '-', and not '.' or '..'"
)


def check_name(value: str) -> str:
    """``value`` if it is a valid workload or pool name; ``ValueError`` saying why otherwise."""
    if not NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not allowed: use 1-64 characters of lowercase letters, digits, '_' and "
            "'-', starting with a letter or digit (it becomes part of file paths, consumer group "
            "ids and tags)"
        )
    return value


#: A workload, pool or cluster name as a pydantic field type (checked by :func:`check_name`).
Name = Annotated[str, AfterValidator(check_name)]


def validate_topic_name(topic: str) -> str:
    """``topic`` if Kafka would accept it; ``ValueError`` saying why otherwise."""
    if not isinstance(topic, str) or not topic:
        why = "must be a non-empty string"
    elif len(topic) > TOPIC_MAX_LEN:
        why = f"{len(topic)} characters, at most {TOPIC_MAX_LEN} allowed"
        topic = f"{topic[:40]}..."
    elif topic in (".", ".."):
        why = "'.' and '..' are reserved"
    elif not _TOPIC_CHARS.fullmatch(topic):
        bad = "".join(sorted({c for c in topic if not _TOPIC_CHARS.fullmatch(c)}))
        why = f"only ASCII letters, digits, '.', '_' and '-' are allowed (found {bad!r})"
    else:
        return topic
    raise ValueError(f"invalid topic name {topic!r}: {why} ({_TOPIC_RULE})")
