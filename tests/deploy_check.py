"""``check_run_launcher``: a Dagster instance file's ``run_launcher`` block checked against the
launcher class's own config schema, with an error naming the file and the field.

Dagster checks a launcher's config only when an instance first uses its launcher: on a
production host, at the first run. Docker and Kubernetes do not run on the build machines, so
this is where a misspelled or mistyped field in ``deploy/`` shows up.

It lives under ``tests/``, not in the product: it needs Dagster's private config API
(``dagster._config``; no public function validates a configurable class's config, and the
product imports no ``dagster._`` module), and only the tests use it (no CLI validates the
deploy files).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from dagster._config import (
    EvaluationError,
    EvaluationStackListItemEntry,
    EvaluationStackMapKeyEntry,
    EvaluationStackMapValueEntry,
    EvaluationStackPathEntry,
    FieldNotDefinedErrorData,
    FieldsNotDefinedErrorData,
    MissingFieldErrorData,
    MissingFieldsErrorData,
    Noneable,
    ScalarUnion,
    resolve_to_config_type,
    validate_config,
)
from dagster._core.instance.config import configurable_class_schema

__all__ = ["check_run_launcher"]

#: Keys the Docker launcher refuses in container_kwargs at run launch (dagster_docker.utils).
_DOCKER_OWN_KEYS = {"image": "image", "environment": "env_vars", "network": "networks"}


def check_run_launcher(path: Path, display: str | None = None) -> None:
    """Raise ``ValueError("<file>: run_launcher.<field>: <reason>")`` unless the instance file's
    run launcher is valid config for the class it names.

    Validation only: ``{env: NAME}`` placeholders pass without NAME being set (the launching
    process resolves them), and no launcher is constructed (the Kubernetes one would load a
    cluster's credentials). ``display`` is the file's name in the message (default: ``path``).
    """
    name = display or path.as_posix()
    data = yaml.safe_load(path.read_text())
    block = data.get("run_launcher") if isinstance(data, Mapping) else None
    if block is None:
        raise ValueError(f"{name}: run_launcher: missing (Dagster would run runs as subprocesses)")
    _raise_first(name, "run_launcher", configurable_class_schema(), block)

    try:
        module = importlib.import_module(block["module"])
    except ImportError as exc:
        raise ValueError(f"{name}: run_launcher.module: cannot import {exc.name!r}") from exc
    launcher = getattr(module, block["class"], None)
    if launcher is None or not hasattr(launcher, "config_type"):
        raise ValueError(
            f"{name}: run_launcher.class: {block['module']} has no configurable class "
            f"{block['class']!r}"
        )
    config = block.get("config") or {}
    _raise_first(name, "run_launcher.config", launcher.config_type(), config, launcher.__name__)
    _check_constructor(name, launcher, config)
    if block["class"] == "DockerRunLauncher":
        _check_docker_kwargs(name, config)


def _raise_first(
    name: str, prefix: str, schema: object, value: object, owner: str | None = None
) -> None:
    """Validate ``value``; raise the first error with its field path (errors come sorted)."""
    result = validate_config(schema, value)
    if result.success:
        return
    error = sorted(result.errors or [], key=_path)[0]
    field, reason = _describe(error, resolve_to_config_type(schema), owner)
    raise ValueError(f"{name}: {'.'.join(filter(None, [prefix, field]))}: {reason}")


def _describe(error: EvaluationError, config_type: object, owner: str | None) -> tuple[str, str]:
    """The field the error is about and why, in words shorter than Dagster's type dumps."""
    path = _path(error)
    data = error.error_data
    if isinstance(data, FieldNotDefinedErrorData | FieldsNotDefinedErrorData):
        names = (
            [data.field_name] if isinstance(data, FieldNotDefinedErrorData) else data.field_names
        )
        known = ", ".join(_fields_at(config_type, error)) or "none"
        where = f"{owner}'s config" if owner and not path else "this block"
        return _join(path, sorted(names)[0]), f"unknown field; {where} accepts: {known}"
    if isinstance(data, MissingFieldErrorData | MissingFieldsErrorData):
        names = [data.field_name] if isinstance(data, MissingFieldErrorData) else data.field_names
        return _join(path, sorted(names)[0]), "required field is missing"
    return path, error.message


def _path(error: EvaluationError) -> str:
    """``a.b[0].c`` from Dagster's evaluation stack."""
    parts: list[str] = []
    for entry in error.stack.entries:
        if isinstance(entry, EvaluationStackPathEntry):
            parts.append(f".{entry.field_name}")
        elif isinstance(entry, EvaluationStackListItemEntry):
            parts.append(f"[{entry.list_index}]")
        elif isinstance(entry, EvaluationStackMapKeyEntry | EvaluationStackMapValueEntry):
            parts.append(f"[{entry.map_key!r}]")
    return "".join(parts).lstrip(".")


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _fields_at(config_type: object, error: EvaluationError) -> list[str]:
    """The field names the schema allows where the error is (empty when not a shape)."""
    current = _unwrap(config_type)
    for entry in error.stack.entries:
        if isinstance(entry, EvaluationStackPathEntry):
            current = _unwrap(current.fields[entry.field_name].config_type)
        elif isinstance(entry, EvaluationStackListItemEntry):
            current = _unwrap(current.inner_type)
    return sorted(getattr(current, "fields", {}))


def _unwrap(config_type: Any) -> Any:
    """Through ``Noneable(X)`` to X, and from ``StringSource`` and the like to their dict form
    (``{env: NAME}``), the only form that has fields."""
    while isinstance(config_type, Noneable | ScalarUnion):
        if isinstance(config_type, Noneable):
            config_type = config_type.inner_type
        else:
            config_type = config_type.non_scalar_type
    return config_type


def _check_constructor(name: str, launcher: type[Any], config: Mapping[str, Any]) -> None:
    """A parameter the launcher's constructor requires that its schema lets out (K8sRunLauncher's
    ``service_account_name``) fails at the first run, not at validation: check it here."""
    fields = resolve_to_config_type(launcher.config_type()).fields
    for parameter in list(inspect.signature(launcher.__init__).parameters.values())[1:]:
        if parameter.default is not inspect.Parameter.empty or parameter.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            continue
        field = fields.get(parameter.name)
        if parameter.name not in config and not (field is not None and field.default_provided):
            raise ValueError(
                f"{name}: run_launcher.config.{parameter.name}: required by "
                f"{launcher.__name__}() (its config schema marks it optional)"
            )


def _check_docker_kwargs(name: str, config: Mapping[str, Any]) -> None:
    """What DockerRunLauncher's constructor refuses, which its schema lets through."""
    kwargs = config.get("container_kwargs") or {}
    for key, instead in _DOCKER_OWN_KEYS.items():
        if key in kwargs:
            raise ValueError(
                f"{name}: run_launcher.config.container_kwargs.{key}: not allowed; "
                f"the launcher sets it from `{instead}`"
            )
    if config.get("network") and config.get("networks"):
        raise ValueError(f"{name}: run_launcher.config.networks: set `network` or `networks`")
