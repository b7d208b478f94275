"""Helpers for workload spec files: strict YAML, ``${VAR}`` interpolation, durations, handler
imports and readable validation errors.

They live apart from :mod:`consumers.config.spec` so that module stays about the contract itself. File
problems raise :class:`~consumers.errors.SpecError`; :func:`parse_duration` raises a plain
``ValueError`` (pydantic adds the field) and :func:`import_callable` a
:class:`HandlerImportError` (the caller adds the file).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import math
import os
import re
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Final

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from consumers.config.yaml_budget import load_yaml
from consumers.errors import HandlerImportError, SpecError

_DURATION = re.compile(r"(?P<value>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?P<unit>ms|s|m|h)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_DURATION_HELP = "use seconds as a number or a string like '250ms', '2s', '1.5s', '5m', '1h'"

# `$${` is an escaped literal `${`; `${...}` is a reference; a lone `${` is unterminated.
_REFERENCE = re.compile(r"(?P<escape>\$\$\{)|\$\{(?P<body>[^}]*)\}|(?P<open>\$\{)")
_VARIABLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)


#: A spec (or platform config) file larger than this is refused unread; a spec is a few KiB.
MAX_SPEC_BYTES: Final = 256 * 1024
#: Characters ``${VAR}`` references may substitute into one file, all references together.
MAX_SUBSTITUTED: Final = 1024 * 1024

#: The state directory unless ``LANEHOUSE_HOME`` or a ``--state-dir`` says otherwise.
DEFAULT_STATE_DIR: Final = Path(".lanehouse")


class FrozenModel(BaseModel):
    """Configuration read from files: immutable once validated, unknown keys refused (a typo
    never passes silently), and inputs kept out of error messages (they may be secrets)."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


def state_dir(given: Path | None = None) -> Path:
    """The platform's state directory (Dagster's home, broker data, the lake, permits.db):
    ``given``, else ``LANEHOUSE_HOME``, else ``.lanehouse``."""
    if given is not None:
        return given
    return Path(os.environ.get("LANEHOUSE_HOME", DEFAULT_STATE_DIR))


def default_lake(home: Path | None = None) -> Path:
    """``LANEHOUSE_LAKE``, else ``<home>/lake`` with ``home`` defaulting to ``LANEHOUSE_HOME``
    or ``.lanehouse``; always absolute, since runs may start in other directories."""
    configured = os.environ.get("LANEHOUSE_LAKE")
    if configured:
        return Path(configured).resolve()
    return (state_dir(home) / "lake").resolve()


def parse_duration(value: object) -> float:
    """Return ``value`` as float seconds: a number of seconds, or ``"250ms"``, ``"1.5s"``, ``"5m"``, ``"1h"``."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}: {_DURATION_HELP}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
        seconds = float(match["value"]) * _UNIT_SECONDS[match["unit"]]
    else:
        raise ValueError(f"invalid duration {value!r}: {_DURATION_HELP}")
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {value!r}: it must be finite")
    if seconds < 0:
        raise ValueError(f"invalid duration {value!r}: it must not be negative")
    return seconds


#: A duration field: float seconds, written as a number or ``"250ms"``, ``"2s"``, ``"5m"``, ``"1h"``.
Duration = Annotated[float, BeforeValidator(parse_duration)]


def dotted(loc: Iterable[object]) -> str:
    """Render a location such as ``("source", "topics", 0)`` as ``source.topics[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def interpolate(data: Any, env: Mapping[str, str], file: str, loc: tuple[object, ...] = ()) -> Any:
    """Resolve ``${VAR}`` and ``${VAR:-default}`` in every string value (not key) of ``data``.

    ``${VAR:-default}`` uses the default when VAR is unset or empty, like the shell. ``$${`` is a
    literal ``${``. Errors name the file, the field and the variable, never a value. All the
    references together substitute at most :data:`MAX_SUBSTITUTED` characters.
    """
    return _interpolate(data, env, file, loc, [MAX_SUBSTITUTED])


def _interpolate(
    data: Any, env: Mapping[str, str], file: str, loc: tuple[object, ...], budget: list[int]
) -> Any:
    if isinstance(data, str):
        return _interpolate_string(data, env, file, loc, budget)
    if isinstance(data, dict):
        return {
            key: _interpolate(value, env, file, (*loc, key), budget) for key, value in data.items()
        }
    if isinstance(data, list):
        return [_interpolate(value, env, file, (*loc, i), budget) for i, value in enumerate(data)]
    return data


def _interpolate_string(
    text: str, env: Mapping[str, str], file: str, loc: tuple[object, ...], budget: list[int]
) -> str:
    def replace(match: re.Match[str]) -> str:
        value = resolve(match)
        budget[0] -= len(value)
        if budget[0] < 0:
            raise SpecError(
                file,
                dotted(loc),
                f"'${{...}}' references substitute more than {MAX_SUBSTITUTED:,} characters into "
                "this file",
            )
        return value

    def resolve(match: re.Match[str]) -> str:
        if match["escape"]:
            return "${"
        if match["open"]:
            raise SpecError(
                file,
                dotted(loc),
                "unterminated '${': close it with '}' or write '$${' for a literal '${'",
            )
        ref = _VARIABLE.fullmatch(match["body"])
        if ref is None:
            raise SpecError(
                file,
                dotted(loc),
                "malformed '${...}' reference: use ${NAME} or ${NAME:-default} (NAME is letters, digits and '_')",
            )
        value = env.get(ref["name"])
        if ref["default"] is not None and not value:
            return ref["default"]
        if value is None:
            name = ref["name"]
            raise SpecError(
                file,
                dotted(loc),
                f"environment variable {name} is not set (write ${{{name}:-default}} to give a default)",
            )
        return value

    return _REFERENCE.sub(replace, text)


def spec_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Yield each path; a directory stands for its ``*.yaml`` and ``*.yml`` files, sorted."""
    for path in map(Path, paths):
        if path.is_dir():
            yield from sorted(
                p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
            )
        else:
            yield path


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Read ``path`` as a YAML mapping; any problem is a :class:`SpecError` naming the file.

    The file may hold :data:`MAX_SPEC_BYTES` and, with its aliases expanded, the budget of
    :mod:`consumers.config.yaml_budget`: a few hundred bytes of aliases cannot hang a caller.
    """
    file = str(path)
    try:
        with Path(path).open("rb") as stream:
            raw = stream.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(file, "", "file not found") from None
    except OSError as exc:
        raise SpecError(file, "", f"cannot read file: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(
            file,
            "",
            f"file is larger than the limit of {MAX_SPEC_BYTES:,} bytes (a spec is a few KiB)",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(file, "", "file is not valid UTF-8") from None
    try:
        data = load_yaml(text, file)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(file, "", f"invalid YAML{where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(file, "", f"invalid YAML: {exc}") from None
    if data is None:
        raise SpecError(file, "", "file is empty: expected a mapping of workload fields")
    if not isinstance(data, dict):
        raise SpecError(
            file,
            "",
            f"expected a mapping of workload fields at the top level, got a {type(data).__name__}",
        )
    return data


@functools.cache
def import_callable(target: str) -> Callable[..., object]:
    """Import ``package.module:attr[.attr]`` and return it; cached, so each module loads once."""
    module_name, sep, attr_path = target.partition(":")
    if not sep or not module_name or not attr_path:
        raise HandlerImportError(f"{target!r} is not an import path: use 'package.module:callable'")
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:  # whatever user code raises at import time is a spec problem
        raise HandlerImportError(
            f"cannot import module {module_name!r} for handler {target!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HandlerImportError(
                f"module {module_name!r} has no attribute {attr_path!r} (handler {target!r})"
            ) from None
    if not callable(obj):
        raise HandlerImportError(f"{target!r} is a {type(obj).__name__}, not a callable")
    return obj


def first_error(exc: ValidationError, model: type[BaseModel]) -> tuple[str, str]:
    """The dotted field path and a readable reason for the first error of a validation of ``model``.

    Inputs are never quoted (they may be secrets); only our own validators' messages and
    pydantic's input-free messages are used. The tag pydantic puts in the location of a
    discriminated union member (``source.kafka.topics``) is left out: it is not a field.
    """
    first = exc.errors(include_url=False)[0]
    loc, owner = _field_path(model, first["loc"])
    if first["type"] == "value_error":
        reason = str(first["ctx"]["error"])
    elif first["type"] == "extra_forbidden":
        reason = _unknown_field(owner, loc)
    elif first["type"] in ("missing", "union_tag_not_found"):
        reason = "this field is required"
    elif first["type"] == "union_tag_invalid":
        expected = str(first["ctx"]["expected_tags"]).replace(", ", " or ")
        reason = f"must be {expected}"
    else:
        reason = first["msg"]
    if first["type"].startswith("union_tag"):
        loc = (*loc, first["ctx"]["discriminator"].strip("'"))
    return dotted(loc), reason


def _field_path(
    model: type[BaseModel], loc: tuple[int | str, ...]
) -> tuple[tuple[int | str, ...], type[BaseModel]]:
    """``loc`` without union tags, and the model owning its last field."""
    path: list[int | str] = []
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        path.append(part)
        field = model.model_fields.get(str(part))
        if field is None:
            break
        if typing.get_origin(field.annotation) is dict and parts:
            path.append(parts.pop(0))  # the key (a cluster's name); its value is the model
        members = _model_members(field.annotation)
        if len(members) == 1:
            model = next(iter(members.values()))
        elif members and parts and parts[0] in members:
            model = members[str(parts.pop(0))]
        else:
            break
    path.extend(parts)
    return tuple(path), model


def _model_members(annotation: Any) -> dict[str, type[BaseModel]]:
    """Models an annotation may hold, by their ``kind`` tag (``""`` for a lone model)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"": annotation}
    members: dict[str, type[BaseModel]] = {}
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel) and "kind" in arg.model_fields:
            for tag in typing.get_args(arg.model_fields["kind"].annotation):
                members[str(tag)] = arg
        elif members == {} and typing.get_args(arg):
            members = _model_members(arg)
    return members


def _unknown_field(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    allowed = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown field {str(loc[-1])!r}; {hint}allowed: {', '.join(allowed)}"
