"""Strict YAML within a budget: what a spec file may hold once every alias is expanded.

YAML aliases (``*name``) share one node, so a few hundred bytes can stand for billions of nodes
(9 levels of 9 aliases: 9**9); shared they cost nothing, but merge keys, ``${VAR}``
interpolation and validation copy them. So the document is checked as a graph before anything
is constructed: each distinct node is visited once and its expanded size remembered, which keeps
the check linear in the file however large the expansion would be. A flat walk over the
parser's events refuses a document over the node or depth budget before it is composed. Over
budget is a :class:`~consumers.errors.SpecError` naming the file.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from consumers.errors import LanehouseError, SpecError

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_NODES", "MAX_YAML_TEXT", "load_yaml"]

#: Nodes (mappings, sequences, scalars; keys included) with every alias expanded. A spec has
#: a few dozen.
MAX_YAML_NODES: Final = 10_000
#: Nesting with every alias expanded. A spec nests about five levels.
MAX_YAML_DEPTH: Final = 64
#: Characters of scalar text with every alias expanded (a file without aliases holds at most
#: its own size).
MAX_YAML_TEXT: Final = 256 * 1024

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _OverBudget(LanehouseError):
    """The document is over a budget; the message says which."""


def _too_many_nodes() -> _OverBudget:
    return _OverBudget(
        f"YAML over budget: more than {MAX_YAML_NODES:,} nodes with every alias ('*name') "
        "expanded (a spec needs a few dozen; an alias repeated inside another multiplies)"
    )


def _too_deep() -> _OverBudget:
    return _OverBudget(
        f"YAML over budget: nested deeper than {MAX_YAML_DEPTH} levels with every alias expanded"
    )


class _StrictLoader(yaml.CSafeLoader):
    """``yaml.CSafeLoader`` (libyaml scans, parses and composes in C, about ten times faster
    than the pure-Python loader) that rejects a key repeated in one mapping instead of keeping
    the last."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> Any:
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
            ident = (key_node.tag, key_node.value)
            if ident in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key_node.value!r}",
                    key_node.start_mark,
                )
            seen.add(ident)
    yield from loader.construct_yaml_map(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
_NODES = (yaml.ScalarEvent, yaml.AliasEvent, *_OPENS)


def _check_events(text: str) -> None:
    """Count the parser's events before anything is composed: libyaml's parser keeps an
    explicit stack, but PyYAML composes in C by recursion, so a file of 100,000 ``[`` must be
    refused by this flat walk first. An alias counts once here; :class:`_Expansion` sizes it.
    """
    depth = nodes = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, _NODES):
            nodes += 1
            if nodes > MAX_YAML_NODES:
                raise _too_many_nodes()
            if depth >= MAX_YAML_DEPTH:
                raise _too_deep()
            if isinstance(event, _OPENS):
                depth += 1
        elif isinstance(event, _CLOSES):
            depth -= 1


def load_yaml(text: str, file: str) -> Any:
    """The single YAML document in ``text``, built only when it fits the budget.

    Syntax errors and repeated keys raise ``yaml.YAMLError``; a document over budget, or an
    alias inside the node it names (``&a [*a]``), a :class:`SpecError` naming ``file``.
    """
    try:
        _check_events(text)
        # _StrictLoader is a SafeLoader: no arbitrary Python objects, same as yaml.safe_load.
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _Expansion().measure(node, 1)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except _OverBudget as exc:
        raise SpecError(file, "", str(exc)) from None


class _Expansion:
    """Sizes of composed nodes as if every alias were expanded, each node measured once."""

    def __init__(self) -> None:
        #: id(node) -> (nodes, characters of text, height)
        self._known: dict[int, tuple[int, int, int]] = {}
        self._open: set[int] = set()

    def measure(self, node: yaml.Node, depth: int) -> tuple[int, int, int]:
        """The expanded size of ``node`` found at ``depth``; _OverBudget past any budget."""
        key = id(node)
        if key in self._open:
            raise _OverBudget(
                "a YAML alias is used inside the node it names (like '&a [*a]'): a spec must be "
                "a tree"
            )
        known = self._known.get(key)
        if known is None:
            self._open.add(key)
            known = self._expand(node, depth)
            self._open.discard(key)
            self._known[key] = known
        if depth + known[2] - 1 > MAX_YAML_DEPTH:
            raise _too_deep()
        return known

    def _expand(self, node: yaml.Node, depth: int) -> tuple[int, int, int]:
        if isinstance(node, yaml.ScalarNode):
            _check(1, len(node.value))
            return 1, len(node.value), 1
        children: list[yaml.Node] = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if children and depth >= MAX_YAML_DEPTH:
            raise _too_deep()
        nodes, text, height = 1, 0, 0
        for child in children:
            child_nodes, child_text, child_height = self.measure(child, depth + 1)
            nodes, text = nodes + child_nodes, text + child_text
            _check(nodes, text)
            height = max(height, child_height)
        return nodes, text, height + 1


def _check(nodes: int, text: int) -> None:
    if nodes > MAX_YAML_NODES:
        raise _too_many_nodes()
    if text > MAX_YAML_TEXT:
        raise _OverBudget(
            f"YAML over budget: more than {MAX_YAML_TEXT:,} characters of text with every alias "
            "expanded"
        )
