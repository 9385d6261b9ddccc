"""Loading a job spec: layering site defaults, the job file and ``--set`` overrides; validating.

Every problem found is reported as a :class:`SpecError` naming where the bad value came from, the
field path (``roles[1].num``), the value and what is allowed; no yaml or pydantic exception leaves
this module.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from primus.config.reading import (
    MAX_CONFIG_BYTES,
    MAX_SET_BYTES,
    InputError,
    parse_yaml,
    printable,
    read_bounded,
    shown,
)
from primus.config.spec import JobSpec
from primus.errors import PrimusError

MAX_SPEC_BYTES = 1 << 20
"""A job as stored (JSON, every default applied): at most 1 MiB, so that it fits in one etcd
request (etcd refuses requests past 1.5 MiB by default)."""

SET_SOURCE = "--set"
SITE_SOURCE = "site defaults"
NO_VALUE: Any = object()
"""``SpecProblem.value`` when there is no bad value to show: a missing field, an unreadable file."""


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a job spec.

    Attributes:
        source: Where the bad value came from: the job file's path, ``--set`` or ``site defaults``.
        field: Path of the field, dotted, with list indices in brackets (``roles[1].num``); empty
            when the problem is the whole source.
        value: The bad value, or :data:`NO_VALUE`.
        allowed: What is allowed there (or, for an unreadable file, what went wrong), in words.
    """

    source: str
    field: str
    value: Any
    allowed: str

    @property
    def reason(self) -> str:
        """What is wrong, without where: the bad value, if any, and what is allowed."""
        if self.value is NO_VALUE:
            return printable(self.allowed)
        return printable(f"got {shown(self.value)}; {self.allowed}")

    def __str__(self) -> str:
        where = f"{self.source}: {self.field}" if self.field else self.source
        return f"{printable(where)}: {self.reason}"


class SpecError(PrimusError):
    """A job spec that cannot be loaded; one line per problem when printed.

    Attributes:
        problems: Every problem found, at least one.
        source: ``source`` of the first problem.
        field: ``field`` of the first problem.
        value: ``value`` of the first problem.
        allowed: ``allowed`` of the first problem.
    """

    def __init__(self, *problems: SpecProblem) -> None:
        super().__init__(*problems)
        self.problems = list(problems)
        first = problems[0]
        self.source, self.field, self.value = first.source, first.field, first.value
        self.allowed = first.allowed

    def __str__(self) -> str:
        return "\n".join(map(str, self.problems))


def load_job_spec(
    path: str | os.PathLike[str],
    *,
    site_defaults: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> JobSpec:
    """Load, layer and validate a job spec.

    Layers, each winning over the one before: the models' built-in defaults, ``site_defaults``, the
    job file, ``overrides``. Mappings merge key by key; any other value, lists included, replaces.
    A relative ``workdir``, relative ``files`` and relative data source paths (not URLs) are
    resolved against the job file's directory;
    an absent ``workdir`` stays ``None`` (where trainers run then depends on the host, see
    :attr:`JobSpec.workdir`).

    Args:
        path: The job file, YAML or JSON.
        site_defaults: Job fields from the site defaults file (its ``job:`` key).
        overrides: ``KEY=VALUE`` strings from ``--set``: KEY is a dotted path in which a segment
            after ``roles`` picks a role by name or index (``roles.worker.num=4``), VALUE is YAML.

    Returns:
        The validated, frozen spec.

    Raises:
        SpecError: With every problem found, attributed to the layer it came from.
    """
    source = os.fspath(path)
    return _layered_spec(read_config_file(source), source,
                         os.path.dirname(os.path.abspath(source)), site_defaults, overrides)


def load_job_text(
    text: str,
    source: str,
    base_dir: str | None,
    *,
    site_defaults: Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
) -> JobSpec:
    """Load, layer and validate a job given as the text of a job file (the API's
    ``SubmitApplication``), exactly as :func:`load_job_spec` loads a file: the same bounds,
    layers and messages.

    Args:
        text: The job, YAML or JSON.
        source: What errors call the text (``train.yaml``).
        base_dir: The directory relative paths are taken from, as a job file's own directory;
            ``None``: a relative ``workdir``, ``files`` entry or data source path is refused.
        site_defaults: As for :func:`load_job_spec`.
        overrides: As for :func:`load_job_spec`.

    Raises:
        SpecError: With every problem found, attributed to the layer it came from.
    """
    encoded = text.encode(errors="surrogateescape")
    if len(encoded) > MAX_CONFIG_BYTES:
        raise SpecError(SpecProblem(source, "", NO_VALUE, f"is {len(encoded):,} bytes; a job "
                                    f"is at most {MAX_CONFIG_BYTES:,} bytes"))
    try:
        data = parse_yaml(encoded)
    except InputError as exc:
        raise SpecError(SpecProblem(source, "", NO_VALUE, str(exc))) from exc
    return _layered_spec(data, source, base_dir, site_defaults, overrides)


def _layered_spec(job_data: Any, source: str, job_dir: str | None,
                  site_defaults: Mapping[str, Any] | None, overrides: Sequence[str]) -> JobSpec:
    """The spec of a parsed job file ``job_data`` (see :func:`load_job_spec`); relative paths
    are taken from ``job_dir``, or refused when it is ``None``."""
    job_file = _require_mapping(job_data, source)
    site = _require_mapping(site_defaults or {}, SITE_SOURCE)
    data = copy.deepcopy(_merge(site, job_file))
    set_paths = [_apply_override(data, override) for override in overrides]
    relative: list[SpecProblem] = []

    def resolved(field: str, path: str) -> str:
        if job_dir is not None:
            return os.path.normpath(os.path.join(job_dir, path))
        if not os.path.isabs(path):
            relative.append(SpecProblem(source, field, path, "must be an absolute path: there "
                                        "is no job file directory to take it from"))
        return path

    if isinstance(data.get("workdir"), str):
        data["workdir"] = resolved("workdir", data["workdir"])
    if isinstance(data.get("files"), list):
        data["files"] = [resolved(f"files[{i}]", f) if isinstance(f, str) else f
                         for i, f in enumerate(data["files"])]
    for i, stream in enumerate(_list(data.get("data"))):
        for j, data_source in enumerate(_list(stream.get("sources"))
                                        if isinstance(stream, dict) else []):
            pattern = data_source.get("path") if isinstance(data_source, dict) else None
            if isinstance(pattern, str) and pattern and "://" not in pattern:
                data_source["path"] = resolved(f"data[{i}].sources[{j}].path", pattern)
            table = data_source.get("table") if isinstance(data_source, dict) else None
            if not isinstance(table, dict):
                continue
            location = table.get("path")
            if isinstance(location, str) and location and "://" not in location:
                table["path"] = resolved(f"data[{i}].sources[{j}].table.path", location)
    if relative:
        raise SpecError(*relative)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            # A bad dict key has loc (..., key, "[key]"); the key's path names it well enough.
            loc = tuple(segment for segment in error["loc"] if segment != "[key]")
            if any(_overlap(loc, set_path) for set_path in set_paths):
                origin = SET_SOURCE
            elif _reach(site, loc) > _reach(job_file, loc):
                origin = SITE_SOURCE
            else:
                origin = source
            value = NO_VALUE if error["type"] == "missing" else error["input"]
            problems.append(SpecProblem(origin, _field_path(loc), value, _allowed(error)))
        raise SpecError(*problems) from exc
    check_stored_size(spec, source)
    return spec


def validate_change(data: Mapping[str, Any], source: str, changed: tuple[str | int, ...]
                    ) -> JobSpec:
    """Validate a running application's job as a change would make it (an added role, a
    data source, a role's new number of executors), with the loader's messages.

    Args:
        data: The whole job, as ``JobSpec.model_dump(mode="json")`` gives it, changed.
        source: What carried the change (the API request field or the CLI argument, e.g.
            ``role``): every problem names it.
        changed: Where in ``data`` the change is (``("roles", 3)``); a problem there is named
            by its path below it (``command``), any other by its path in the job.

    Raises:
        SpecError: With every problem found.
    """
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_url=False):
            loc = tuple(segment for segment in error["loc"] if segment != "[key]")
            field = loc[len(changed):] if loc[:len(changed)] == changed else loc
            value = NO_VALUE if error["type"] == "missing" else error["input"]
            problems.append(SpecProblem(source, _field_path(field), value, _allowed(error)))
        raise SpecError(*problems) from exc
    check_stored_size(spec, source)
    return spec


def check_stored_size(spec: JobSpec, source: str) -> None:
    """Refuse a spec that would not fit in one etcd value, naming its largest field.

    Raises:
        SpecError: Its JSON form is larger than :data:`MAX_SPEC_BYTES`.
    """
    stored = len(spec.model_dump_json())
    if stored <= MAX_SPEC_BYTES:
        return
    stored_form = spec.model_dump(mode="json")
    sizes = {f"roles[{i}]": len(json.dumps(role)) for i, role in enumerate(stored_form["roles"])}
    sizes |= {name: len(json.dumps(value)) for name, value in stored_form.items()
              if name != "roles"}
    largest = max(sizes, key=lambda name: sizes[name])
    raise SpecError(SpecProblem(
        source, largest, NO_VALUE, f"the job would be stored as {stored:,} bytes of JSON, "
        f"{sizes[largest]:,} of them here; a job is at most {MAX_SPEC_BYTES:,} bytes"))


def read_config_file(source: str, limit: int = MAX_CONFIG_BYTES) -> Any:
    """Read and parse a YAML/JSON configuration file within the bounds of
    :mod:`primus.config.reading`.

    Raises:
        SpecError: Naming ``source``, when it cannot be read or is past a bound.
    """
    try:
        return parse_yaml(read_bounded(source, limit))
    except OSError as exc:
        raise SpecError(SpecProblem(source, "", NO_VALUE, f"cannot read: {exc.strerror}")) from exc
    except InputError as exc:
        raise SpecError(SpecProblem(source, "", NO_VALUE, str(exc))) from exc


def _list(value: Any) -> list[Any]:
    """``value`` if it is a list, else none: validation refuses it later, naming the field."""
    return value if isinstance(value, list) else []


def _overlap(loc: tuple[str | int, ...], set_path: tuple[str | int, ...]) -> bool:
    """Whether an error at ``loc`` concerns the value set at ``set_path``: one holds the other."""
    shorter = min(len(loc), len(set_path))
    return loc[:shorter] == set_path[:shorter]


def _require_mapping(data: Any, source: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        allowed = f"must be a mapping of job fields ({', '.join(JobSpec.model_fields)})"
        raise SpecError(SpecProblem(source, "", data, allowed))
    return data


def _merge(base: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        below = merged.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge(below, value)
        else:
            merged[key] = value
    return merged


def _apply_override(data: dict[str, Any], override: str) -> tuple[str | int, ...]:
    """Set one ``KEY=VALUE`` override in ``data``; return the path it set, role names as indices."""
    if len(override.encode(errors="surrogateescape")) > MAX_SET_BYTES:
        raise _set_error("", override, f"a --set is at most {MAX_SET_BYTES >> 10} KiB")
    key, equals, text = override.partition("=")
    segments = key.split(".")
    if not equals or not all(segments):
        raise _set_error("", override, "must be KEY=VALUE, KEY dotted, e.g. roles.worker.num=4")
    try:
        value = parse_yaml(text)
    except InputError as exc:
        raise _set_error(key, text, str(exc)) from exc
    node: Any = data
    path: list[str | int] = []
    for depth, segment in enumerate(segments):
        if isinstance(node, list):
            step: str | int = _select_item(node, segment, key)
        elif isinstance(node, dict):
            step = segment
        else:
            where = ".".join(segments[:depth])
            raise _set_error(key, node, f"{where} is not a mapping, so it has no {segment!r}")
        path.append(step)
        if depth == len(segments) - 1:
            node[step] = value
        else:
            node = node.setdefault(step, {}) if isinstance(node, dict) else node[step]
    return tuple(path)


def _select_item(items: list[Any], segment: str, key: str) -> int:
    # ASCII digits only: str.isdigit() also holds for "²", which int() refuses; and a length
    # bound, for int() refuses more than 4,300 digits.
    if segment.isascii() and segment.isdigit() and len(segment) <= 9 and int(segment) < len(items):
        return int(segment)
    names = [item.get("name") for item in items if isinstance(item, Mapping)]
    if segment in names:
        return names.index(segment)
    allowed = f"must be an index below {len(items)}"
    if names:
        allowed += " or one of the names " + ", ".join(map(str, names))
    raise _set_error(key, segment, allowed)


def _set_error(key: str, value: Any, allowed: str) -> SpecError:
    return SpecError(SpecProblem(SET_SOURCE, key, value, allowed))


def _reach(layer: Any, loc: tuple[str | int, ...]) -> int:
    """How many leading segments of ``loc`` a layer decides.

    A layer decides everything under a list or scalar it holds: those replace, never merge.
    """
    node = layer
    for depth, segment in enumerate(loc):
        if not isinstance(node, Mapping):
            return len(loc)
        if segment not in node:
            return depth
        node = node[segment]
    return len(loc)


def _field_path(loc: tuple[str | int, ...]) -> str:
    """``("roles", 1, "num")`` as ``roles[1].num``."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return text.lstrip(".")


_RULES = {
    "missing": "is required",
    "string_type": "must be a string",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "list_type": "must be a list",
    "string_pattern_mismatch": "must match {pattern}",
    "too_short": "must have at least {min_length} entry",
    "string_too_long": "must be at most {max_length} characters",
    "finite_number": "must be a finite number",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
}
_NUMBER_KINDS = {int: "an integer", float: "a number"}
_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _allowed(error: ErrorDetails) -> str:
    """Say in words what the field of a pydantic error accepts."""
    kind, ctx = error["type"], error.get("ctx", {})
    model, field = _locate(error["loc"])
    if kind == "value_error":
        allowed = str(ctx["error"])
    elif kind == "extra_forbidden":
        allowed = "unknown field; allowed: " + ", ".join(model.model_fields)
    elif field is not None and field.annotation in _NUMBER_KINDS:
        found = {name: bound  # the field's own bound wins over its type's
                 for constraint in field.metadata for name in _BOUNDS
                 if (bound := getattr(constraint, name, None)) is not None}
        bounds = [f"{symbol} {found[name]}" for name, symbol in _BOUNDS.items() if name in found]
        allowed = f"must be {_NUMBER_KINDS[field.annotation]} {' and '.join(bounds)}".rstrip()
    else:
        rule = _RULES.get(kind)
        allowed = rule.format(**ctx) if rule else error["msg"]
    return f"the key {allowed}" if error["loc"][-1:] == ("[key]",) else allowed


def _locate(loc: tuple[str | int, ...]) -> tuple[type[BaseModel], FieldInfo | None]:
    """Return the innermost model along ``loc`` and the field ``loc`` ends at, if it ends at one."""
    model: type[BaseModel] = JobSpec
    names = [segment for segment in loc if isinstance(segment, str)]
    field = None
    for depth, name in enumerate(names):
        field = model.model_fields.get(name)
        nested = _nested_model(field.annotation) if field else None
        if nested is None:
            return model, field if depth == len(names) - 1 else None
        model = nested
    return model, field


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, directly or as list items."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None
