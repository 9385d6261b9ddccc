"""The job spec: what a user asks Primus to run, as frozen, validated pydantic models.

A job is a set of roles (chief, ps, worker...), each a number of executors running the same trainer
command with the same resources, plus a policy for the application master. The loader
(:mod:`primus.config.loader`) builds a :class:`JobSpec` from YAML/JSON and turns validation errors
into :class:`~primus.config.loader.SpecError`; the field descriptions here are the user-facing
reference and end up in the JSON schema (``primus spec schema``).
"""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

ROLE_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
JOB_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
QUEUE_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
DOMAIN_LEVEL_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
"""A level of host domains (``rack``, ``nvlink_clique``): the site's ``topology.levels``."""
SAVEPOINT_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}/[0-9]{1,6}$"
"""A savepoint: its application's id, ``/`` and its number."""

MAX_STRING = 65_536
"""Characters of any one string of a job (the kernel passes at most 128 KiB in one argument or
environment string; a job is stored in one etcd value)."""
MAX_SECONDS = 10 * 365 * 86_400
"""Longest duration: ten years, in seconds."""
MAX_EXECUTORS = 100_000
"""Executors of one role, and of a whole job."""
MAX_COUNT = 1_000_000_000
MAX_SHUFFLE_BUFFER = 10_000_000
"""Records of a shuffle window at most: a reader holds a window in memory (a window also ends
at 256 MiB)."""
"""Upper bound of the other counts (failures, epochs, records...)."""
MAX_BYTES = 2**60
"""Largest size in bytes (1 EiB)."""


@dataclass(frozen=True)
class _CountWithUnit:
    """Annotation for an int field that also accepts a whole number with a unit suffix.

    Validation turns ``"2m"`` or ``"4Gi"`` into an int before the field's bounds are checked; the
    JSON schema offers both forms.

    Attributes:
        units: Multiplier of each suffix; the empty suffix is the base unit.
        allowed: What the field accepts, in words, raised as the error message.
    """

    units: Mapping[str, int] = field(hash=False)  # hashable, so that `Seconds | None` works
    allowed: str = ""
    most: int = 0
    """The largest value, in base units; larger ones are refused with ``too_large``."""
    too_large: str = ""

    @property
    def pattern(self) -> str:
        """Regular expression, anchored, for the text form: digits, then one of the suffixes."""
        return "^([0-9]+)(" + "|".join(self.units) + ")$"

    def parse(self, value: object) -> int:
        """Return ``value`` as an int of base units.

        Raises:
            ValueError: If ``value`` is neither an int nor a whole number with a known suffix.
        """
        match = re.fullmatch(self.pattern, value) if isinstance(value, str) else None
        if match:
            number = int(match[1]) * self.units[match[2]]
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            raise ValueError(self.allowed)
        if number > self.most:
            raise ValueError(self.too_large)
        return number

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_before_validator_function(self.parse, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        return {"anyOf": [handler(schema), {"type": "string", "pattern": self.pattern}]}


Seconds = Annotated[
    int,
    _CountWithUnit(
        {"": 1, "s": 1, "m": 60, "h": 3600},
        "must be a whole number of seconds, or a whole number with a unit s, m or h (10s, 2m, 1h)",
        MAX_SECONDS,
        f"must be at most {MAX_SECONDS} seconds (ten years)",
    ),
]
"""A duration in whole seconds; also accepts text such as ``"90"``, ``"10s"``, ``"2m"``."""

LONG_DURATION = _CountWithUnit(
    {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400},
    "must be a whole number of seconds, or a whole number with a unit s, m, h or d (90s, 2h, 7d)",
    MAX_SECONDS,
    f"must be at most {MAX_SECONDS} seconds (ten years)",
)
"""Parses durations counted in days as well (the history's retention, ``primus history prune
--before 30d``): :meth:`_CountWithUnit.parse` returns whole seconds."""

BYTES = _CountWithUnit(
    {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
     "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40},
    "must be a whole number of bytes, or a whole number with a unit k, M, G, T (powers of 1000)"
    " or Ki, Mi, Gi, Ti (powers of 1024), e.g. 512Mi, 4Gi, 2G",
    MAX_BYTES,
    "must be at most 2^60 bytes (1 EiB)",
)
"""Parses sizes (a job's ``memory``, the site's ``server.max_upload``): returns bytes."""

ByteCount = Annotated[int, BYTES]
"""A size in bytes; also accepts text such as ``"1024"``, ``"100M"``, ``"512Mi"``, ``"4Gi"``."""


def size_text(count: int) -> str:
    """A size in bytes as people read a limit: ``4 GiB``, ``70.4 MiB``, ``512 B``."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} B"


def _number_as_text(value: object) -> object:
    # YAML reads `OMP_NUM_THREADS: 4` and `--set env.X=4` as numbers; env values are text anyway.
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _check_command(value: object) -> object:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, list) and value and all(isinstance(a, str) and a.strip() for a in value):
        return value
    raise ValueError(
        "must be a non-blank string (run by /bin/sh -c) or a non-empty list of non-blank strings"
        " (executed directly)"
    )


OOM_KILLED = "OOM_KILLED"
"""The exit class of a trainer the kernel killed at its memory limit (exit code 137)."""
NOTIFY_EVENTS = ("app_state", "hang", "host_quarantined", "admission_wait", "array_end")
"""What a webhook may be told of (docs/observability.md, "Notifications")."""
MAX_URL = 2048
MAX_COLUMN_NAME = 1024
"""Characters of a column name in a stream's ``columns``."""
HUNG = "HUNG"
"""The exit class of a trainer stopped because it hung (``on_hang: restart``)."""
ExitCode = Annotated[int, Field(ge=1, le=255, strict=True)] | Literal["OOM_KILLED", "HUNG"]
"""An exit code 1 to 255, or a class: ``OOM_KILLED`` (killed at its memory limit), ``HUNG``
(stopped as hung)."""

Env = dict[
    Annotated[str, Field(pattern=ENV_NAME_PATTERN)],
    Annotated[str, BeforeValidator(_number_as_text)],
]
Command = Annotated[str | list[str], BeforeValidator(_check_command)]


GpuLocality = Literal["nvlink", "switch", "numa", "any"]
"""How close GPUs are linked, closest first (``primus.scheduler.gpu_topology.Link``)."""
GPU_LOCALITIES: tuple[str, ...] = get_args(GpuLocality)


class _SpecModel(BaseModel):
    # Values no process can receive are refused here, whatever the input path: infinities and
    # NaN (stored as JSON null, they broke every later read), strings past MAX_STRING or with NUL.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False,
                              str_max_length=MAX_STRING)

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        problems = []
        plain = _plain_fields(cls)
        for name, value in data.items():
            if name not in plain:
                continue  # unknown fields are refused anyway; a nested model checks itself
            for loc, text in _strings(value, (name,)):
                if "\0" in text:
                    problems.append(InitErrorDetails(
                        type=PydanticCustomError(
                            "nul_character", "must not contain a NUL character (\\0): no"
                            " process can receive it in an argument or environment variable"),
                        loc=loc, input=text))
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return data


@functools.cache
def _plain_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of ``model`` that hold no model (whose strings its own check reads)."""
    return frozenset(name for name, info in model.model_fields.items()
                     if not _holds_model(info.annotation))


def _holds_model(annotation: Any) -> bool:
    """Whether a field's annotation is, or holds, a model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(arg) for arg in get_args(annotation))


def _strings(value: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string in ``value`` (a string, a list, a mapping's keys and values), with its loc."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*loc, index))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield from _strings(key, (*loc, key, "[key]"))
            yield from _strings(item, (*loc, str(key)))


class StragglerSpec(_SpecModel):
    """When an executor of a role reading a data stream counts as a straggler and is moved."""

    factor: float = Field(
        default=4.0, gt=1, le=1000,
        description="An executor reading more than this many times slower than its role's median"
        " (over window) is relaunched on another host, its task resuming at its checkpoint.",
    )
    window: Seconds = Field(
        default=60, ge=1, le=86400,
        description="The span rates are measured over, in seconds or a duration like 2m; an"
        " executor is judged once it has read for this long.",
    )
    max_percent: float = Field(
        default=25, gt=0, le=100,
        description="At most this share of the role (rounded down, at least one executor) is"
        " being moved at once.",
    )


AUTOSIZE_MIN_CPU = 0.1
"""Cores per executor autosize reserves at least, where ``autosize.cpu.min`` is unset (or the
role's cpu, when less)."""
AUTOSIZE_MIN_MEMORY = 64 << 20
"""Bytes per executor autosize reserves at least, where ``autosize.memory.min`` is unset (or
the role's memory, when less)."""


def _check_bounds(low: float | None, high: float | None, text: Callable[[float], str]) -> None:
    """Refuse an autosize ``min`` above its ``max`` (each written by ``text``)."""
    if low is not None and high is not None and low > high:
        raise PydanticCustomError("min_above_max", "min {min} is above max {max}",
                                  {"min": text(low), "max": text(high)})


class AutosizeCpuSpec(_SpecModel):
    """How ``autosize`` sizes a role's CPU from what its trainers use."""

    target: float = Field(
        default=0.8, gt=0, le=1,
        description="The share of its reservation the busiest executor of the role should use:"
        " the role is resized to what that executor used over the interval divided by this.",
    )
    min: float | None = Field(
        default=None, gt=0, le=100_000,
        description="Fewest CPU cores per executor autosize reserves. Unset: a tenth of a core"
        " (or the role's cpu, when less).",
    )
    max: float | None = Field(
        default=None, gt=0, le=100_000,
        description="Most CPU cores per executor autosize reserves. Unset: the role's cpu (it"
        " only gives back what the job asked for).",
    )

    @model_validator(mode="after")
    def _min_within_max(self) -> AutosizeCpuSpec:
        _check_bounds(self.min, self.max, lambda cores: f"{cores:g}")
        return self


class AutosizeMemorySpec(_SpecModel):
    """How ``autosize`` sizes a role's memory from what its trainers held."""

    headroom: float = Field(
        default=0.25, ge=0, le=10,
        description="Memory reserved beyond the most any executor of the role held (its"
        " peak): 0.25 reserves a quarter more.",
    )
    min: ByteCount | None = Field(
        default=None, gt=0,
        description="Least memory per executor autosize reserves. Unset: 64Mi (or the role's"
        " memory, when less).",
    )
    max: ByteCount | None = Field(
        default=None, gt=0,
        description="Most memory per executor autosize reserves. Unset: the role's memory.",
    )

    @model_validator(mode="after")
    def _min_within_max(self) -> AutosizeMemorySpec:
        _check_bounds(self.min, self.max, lambda count: size_text(int(count)))
        return self


class AutosizeSpec(_SpecModel):
    """A role sized by Primus from its trainers' measured use (docs/scheduling.md,
    "Autosize"): the whole role together, within bounds, at most once an interval."""

    cpu: AutosizeCpuSpec | None = Field(
        default=None, description="Size the role's CPU from use. Unset: its CPU stays.")
    memory: AutosizeMemorySpec | None = Field(
        default=None, description="Size the role's memory from use. Unset: its memory stays.")
    interval: Seconds = Field(
        default=300, ge=1, le=86400,
        description="Use is measured over this span (seconds or a duration like 5m) before a"
        " resize, and the role is resized at most once each.",
    )
    hysteresis: float = Field(
        default=0.1, ge=0, le=1,
        description="A size is changed only when the new one differs from it by more than"
        " this share (0.1: ten percent), so that noise does not resize the role.",
    )


class RoleSpec(_SpecModel):
    """One role of a job: ``num`` executors that each run the same trainer command."""

    name: str = Field(
        pattern=ROLE_NAME_PATTERN,
        description="Role name, unique within the job (chief, ps, worker...): 1 to 32 lowercase"
        " letters, digits, '_' or '-', starting with a letter.",
    )
    num: int = Field(default=1, ge=1, le=MAX_EXECUTORS, strict=True,
                     description="Number of executors of this role.")
    command: Command = Field(
        description="Trainer command: a string, run through /bin/sh -c, or a list of arguments,"
        " executed directly without a shell.",
    )
    env: Env = Field(
        default={},
        description="Environment variables for this role's trainers; they win over the job's env."
        " Numbers are turned into text.",
    )
    cpu: float = Field(
        default=1.0,
        gt=0,
        le=100_000,
        strict=True,
        description="CPU cores reserved per executor; may be fractional.",
    )
    memory: ByteCount = Field(
        default="1Gi",
        gt=0,
        validate_default=True,
        description="Memory reserved per executor, normalised to bytes: a number of bytes, or a"
        " number with a unit k, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024).",
    )
    gpu: int = Field(default=0, ge=0, le=1024, strict=True,
                     description="GPUs reserved per executor.")
    gpu_locality: GpuLocality = Field(
        default="any",
        description="How close an executor's GPUs must be linked: nvlink (NVLink or NVSwitch"
        " between every pair), switch (one PCIe switch), numa (one NUMA node) or any. Only"
        " hosts whose GPU topology is known (the inventory's primus_gpu_topology) take a role"
        " that asks for more than any.",
    )
    gpu_locality_preferred: GpuLocality | None = Field(
        default=None,
        description="How close the GPUs should be where a free set allows it (nvlink, switch,"
        " numa), falling back to gpu_locality; as close as gpu_locality or closer. Unset:"
        " gpu_locality.",
    )
    cpu_binding: Literal["none", "numa"] = Field(
        default="none",
        description="numa binds each trainer's CPUs and memory (a cpuset cgroup) to the NUMA"
        " node(s) of its GPUs, so that copies to them do not cross sockets; needs gpu and"
        " hosts whose GPU topology names each GPU's NUMA node. none: no binding.",
    )
    ports: int = Field(
        default=1,
        ge=0,
        le=64,
        strict=True,
        description="How many TCP ports the executor reserves for the trainer (0 to 64).",
    )
    success_percent: float = Field(
        default=100.0,
        ge=0,
        le=100,
        strict=True,
        description="Share of this role's executors, in percent, that must succeed for the role to"
        " count as succeeded (0 to 100). 0 means the role never holds success back and its"
        " failures never fail the application (a parameter server that runs until stopped).",
    )
    straggler: StragglerSpec | None = Field(
        default=None,
        description="Straggler rescheduling for a role that reads a data stream (factor, window,"
        " max_percent); unset: off.",
    )
    min_num: int | None = Field(
        default=None,
        ge=1, le=MAX_EXECUTORS,
        strict=True,
        description="Elastic minimum (1 to num): the application goes on while at least this"
        " many of the role's executors run or succeeded; the role then needs no more than this"
        " many successes. Unset: num.",
    )
    max_per_host: int | None = Field(
        default=None,
        ge=1, le=MAX_EXECUTORS,
        strict=True,
        description="At most this many executors of this role on one host; unset: no limit.",
    )
    hosts: list[str] = Field(
        default=[],
        description="Host selector: place this role only on hosts in one of these inventory"
        " groups or carrying one of these primus_labels; empty: any host.",
    )
    restart_policy: Literal["never", "on_failure", "always", "exit_code"] = Field(
        default="never",
        description="When an executor's attempt is restarted: never; on_failure (any non-zero"
        " exit or a lost executor); always (also after exit 0: the role never succeeds, use it"
        " with success_percent 0); exit_code (only exits 128 and above, i.e. killed by a"
        " signal, lost executors, and the codes in retryable_exit_codes). Codes in"
        " permanent_exit_codes are never restarted, whatever the policy.",
    )
    retryable_exit_codes: list[ExitCode] = Field(
        default=[],
        description="Exit codes (1 to 255) that restart_policy exit_code restarts; OOM_KILLED"
        " stands for a trainer killed at its memory limit, HUNG for one stopped as hung.",
    )
    permanent_exit_codes: list[ExitCode] = Field(
        default=[],
        description="Exit codes (1 to 255) that fail the executor at once, without a restart;"
        " OOM_KILLED stands for a trainer killed at its memory limit (the same memory would"
        " run out again), HUNG for one stopped as hung.",
    )
    max_failures: int = Field(
        default=3,
        ge=1, le=MAX_COUNT,
        strict=True,
        description="An executor index that failed this many times (in one application"
        " attempt) is not restarted again.",
    )
    max_role_failures: int | None = Field(
        default=None,
        ge=1, le=MAX_COUNT,
        strict=True,
        description="Once this role's executors failed this many times in total (in one"
        " application attempt), none of them is restarted again; unset: no role limit.",
    )
    restart_backoff: Seconds = Field(
        default=1,
        ge=0,
        description="Delay before a restart: the first restart of an executor is immediate,"
        " the n-th waits restart_backoff × 2^(n-2) seconds, up to restart_backoff_max.",
    )
    restart_backoff_max: Seconds = Field(
        default=60,
        ge=0,
        description="Upper bound of the delay before a restart, in seconds or a duration.",
    )
    failure_action: Literal["fail_app", "fail_executor"] = Field(
        default="fail_app",
        description="What an executor that failed for good (no restart left) does: fail_app"
        " fails the application as soon as the role can no longer reach success_percent;"
        " fail_executor only marks the executor FAILED and lets the others run to their end,"
        " then the role's success_percent decides.",
    )
    on_cluster_change: Literal["restart", "signal", "none"] = Field(
        default="none",
        description="How this role's running trainers learn of a new cluster spec (an executor"
        " joined, left or restarted elsewhere; a role scaled, added or removed): restart stops"
        " them (SIGTERM, policy.stop_grace, SIGKILL) and starts them again with the new"
        " environment, as torchelastic does on a membership change (PyTorch DDP); signal"
        " writes the new spec to the file named by PRIMUS_CLUSTER_FILE and sends them"
        " cluster_signal, which the processes that set no handler for it ignore (trainers that"
        " rebuild their own communication, elastic trainers);"
        " none only updates that file (TensorFlow parameter servers, trainers that never need"
        " to know). A restart is neither a failure nor a new attempt.",
    )
    resize: Literal["wait", "move"] = Field(
        default="wait",
        description="What a resize (primus resize) does where an executor's host has no room"
        " for its new size: wait until room frees (the reason in primus queue), or move the"
        " executor to a host where it fits (a restart there, counted as a move, not a"
        " failure).",
    )
    autosize: AutosizeSpec | None = Field(
        default=None,
        description="Size the role's executors from what their trainers use (a resize in"
        " place, as primus resize does, by the user autosize): cpu to a target share of the"
        " reservation, memory to the peak held plus headroom, within min and max. Unset: the"
        " role keeps the size it asked for.",
    )
    cluster_signal: str = Field(
        default="SIGUSR1",
        description="The signal on_cluster_change signal sends to the trainer's process group,"
        " whose processes start with it ignored (only those that set a handler see it, not the"
        " shell that runs a command string): a signal name such as SIGUSR1, SIGUSR2 or SIGHUP"
        " (not SIGKILL or SIGSTOP, nor SIGTERM, which stops a trainer).",
    )
    hang_timeout: Seconds | None = Field(
        default=None,
        description="A trainer of this role that for this long wrote no output, read no data"
        " and made no progress report (touching PRIMUS_PROGRESS_FILE, or"
        " primus.progress.report()) is hung: the Python stacks of every trainer of the role are"
        " taken at once and kept with the application, and on_hang applies. At least the"
        " job's policy.heartbeat_ttl. Unset: not watched.",
    )
    on_hang: Literal["report", "restart", "fail"] = Field(
        default="report",
        description="What follows a hang of this role: report (an event with where each rank"
        " stands, and the stacks), restart (also stop the role's trainers as failed with exit"
        " class HUNG; its restart_policy decides the rest) or fail (the application fails,"
        " its diagnosis saying where the ranks stand).",
    )

    @field_validator("cluster_signal")
    @classmethod
    def _cluster_signal_is_a_signal(cls, name: str) -> str:
        # SIGTERM is how Primus stops a trainer: a trainer started with it ignored would
        # shrug a stop off until SIGKILL, and could not tell a stop from a new cluster.
        allowed = {s.name for s in signal.Signals} - {"SIGKILL", "SIGSTOP", "SIGTERM"}
        if name not in allowed:
            raise PydanticCustomError(
                "unknown_signal", "must be a signal name other than SIGKILL, SIGSTOP and"
                " SIGTERM (which stops a trainer), such as SIGUSR1, SIGUSR2, SIGHUP or SIGINT")
        return name

    @model_validator(mode="after")
    def _min_num_within_num(self) -> RoleSpec:
        if self.min_num is not None and self.min_num > self.num:
            raise PydanticCustomError(
                "min_num_above_num", "min_num {min_num} is above num {num}; must be 1 to num",
                {"min_num": self.min_num, "num": self.num})
        return self

    @model_validator(mode="after")
    def _locality_of_gpus(self) -> RoleSpec:
        rank = GPU_LOCALITIES.index
        if self.gpu_locality_preferred is not None and \
                rank(self.gpu_locality_preferred) > rank(self.gpu_locality):
            raise PydanticCustomError(
                "preferred_farther",
                "gpu_locality_preferred {preferred} is farther than gpu_locality {required};"
                " must be as close or closer (nvlink, switch, numa, any: closest first)",
                {"preferred": self.gpu_locality_preferred, "required": self.gpu_locality})
        if self.cpu_binding == "numa" and not self.gpu:
            raise PydanticCustomError(
                "binding_without_gpus", "cpu_binding numa binds to the NUMA node(s) of the"
                " executor's GPUs; the role reserves none (gpu: 0): set gpu, or cpu_binding:"
                " none", {})
        return self

    @field_validator("autosize")
    @classmethod
    def _autosize_bounds(cls, auto: AutosizeSpec | None, info: ValidationInfo
                         ) -> AutosizeSpec | None:
        # Bounds left unset are written in, from the role's own size: the stored spec says
        # them, and a later primus resize is checked against them as the job asked.
        if auto is None or "cpu" not in info.data or "memory" not in info.data:
            return auto
        update: dict[str, Any] = {}
        for name, least, text in (("cpu", AUTOSIZE_MIN_CPU, lambda cores: f"{cores:g}"),
                                  ("memory", AUTOSIZE_MIN_MEMORY,
                                   lambda count: size_text(int(count)))):
            bounds, size = getattr(auto, name), info.data[name]
            if bounds is None:
                continue
            low = bounds.min if bounds.min is not None else min(least, size)
            high = bounds.max if bounds.max is not None else size
            if not low <= size <= high:
                raise PydanticCustomError(
                    "outside_autosize", "the role's {name} {size} is outside autosize.{name}'s"
                    " min {min} and max {max} (unset: at most the role's {name}); it starts"
                    " at its {name}, which must lie within them",
                    {"name": name, "size": text(size), "min": text(low), "max": text(high)})
            update[name] = bounds.model_copy(update={"min": low, "max": high})
        return auto.model_copy(update=update)

    @model_validator(mode="after")
    def _always_means_no_success(self) -> RoleSpec:
        if self.restart_policy == "always" and self.success_percent > 0:
            raise PydanticCustomError(
                "always_restarts",
                "restart_policy always restarts executors even after they succeed, so the role"
                " could never reach success_percent {percent}; set success_percent: 0 (a role"
                " that runs until the others are done) or use on_failure",
                {"percent": f"{self.success_percent:g}"})
        return self

    def restartable(self, exit_code: int | None, exit_class: str = "") -> bool:
        """Whether this role's policy restarts an attempt that ended with ``exit_code`` (of
        ``exit_class``, e.g. ``OOM_KILLED``).

        ``None`` stands for a lost executor (no exit code, like a kill by a signal). The budget
        (``max_failures``, ``max_role_failures``) is the AM's business, not checked here.
        """
        if exit_code is not None and exit_code in self.permanent_exit_codes or \
                exit_class and exit_class in self.permanent_exit_codes:
            return False
        policy = self.restart_policy
        if policy == "always":
            return True
        if exit_code == 0 or policy == "never":
            return False
        if policy == "on_failure":
            return True
        return exit_code is None or exit_code >= 128 or exit_code in self.retryable_exit_codes \
            or bool(exit_class) and exit_class in self.retryable_exit_codes

    def restart_delay(self, failures: int) -> float:
        """Seconds to wait before restarting an executor that has failed ``failures`` times."""
        if failures <= 1:
            return 0.0
        return float(min(self.restart_backoff_max, self.restart_backoff * 2 ** (failures - 2)))


class PolicySpec(_SpecModel):
    """How the application master supervises the job's executors."""

    heartbeat_ttl: Seconds = Field(
        default=10,
        ge=2,
        le=300,
        description="TTL of each executor's etcd lease, in seconds (2 to 300) or a duration like"
        " 10s: an executor not heard from for this long is lost.",
    )
    register_timeout: Seconds = Field(
        default=120,
        gt=0,
        description="How long the application master waits for every executor to register before"
        " it fails the application, in seconds or a duration like 2m.",
    )
    stop_grace: Seconds = Field(
        default=10,
        ge=0,
        description="Time between SIGTERM and SIGKILL when stopping trainers, in seconds or a"
        " duration like 30s.",
    )
    max_app_attempts: int = Field(
        default=1,
        ge=1,
        le=100,
        strict=True,
        description="Attempts of the whole application (1 to 100): when an attempt fails, every"
        " executor is stopped and the application starts again, placed afresh, keeping its"
        " data progress.",
    )
    deadline: Seconds | None = Field(
        default=None,
        gt=0,
        description="Wall-clock limit of the application from its submission, over all"
        " attempts, in seconds or a duration like 6h; when it passes, the application is"
        " stopped and FAILED (exit code 124). Unset: no limit.",
    )
    blacklist_failures: int = Field(
        default=3,
        ge=0, le=MAX_COUNT,
        strict=True,
        description="A host where this many executor attempts failed or were lost is"
        " avoided for blacklist_cooldown: restarts go to other hosts when any fits. 0: never"
        " blacklist.",
    )
    blacklist_cooldown: Seconds = Field(
        default=600,
        gt=0,
        description="How long a blacklisted host is avoided, in seconds or a duration.",
    )


class StartSpec(_SpecModel):
    """How the application's trainers start (docs/job-spec.md#start-policies)."""

    policy: Literal["gang", "dynamic", "ordered"] = Field(
        default="gang",
        description="gang: no trainer starts before every executor registered (synchronous"
        " training); dynamic: each trainer starts as soon as its executor registered, later"
        " members reaching the others through new cluster spec versions (asynchronous PS"
        " training); ordered: roles start in the job's order, each once the previous one has"
        " schedule_percent of its executors running, trainers starting as in dynamic.",
    )
    schedule_percent: int = Field(
        default=100, ge=1, le=100, strict=True,
        description="ordered: the share of a role's executors (1 to 100 percent) whose trainers"
        " must run (or have succeeded) before the next role is launched.",
    )
    timeout: Seconds | None = Field(
        default=None, gt=0,
        description="ordered: how long a role may take, from its first launch, to reach"
        " schedule_percent, in seconds or a duration like 5m; unset: no limit.",
    )
    on_timeout: Literal["fail", "continue"] = Field(
        default="fail",
        description="ordered: when a role's timeout passes short of schedule_percent, fail the"
        " application or launch the next role with what runs.",
    )


class AmSpec(_SpecModel):
    """Where the application master runs."""

    host: str | None = Field(
        default=None,
        description="Inventory host to run the AM on; unset: the submitting host.",
    )
    replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        strict=True,
        description="AM candidates to start (1 to 5): one leads, the others stand by and take"
        " over, adopting every running executor, when the leader is lost. The first runs on"
        " `host`, the others on other inventory hosts when there are any.",
    )


MAX_ARRAY = 10_000
"""Members one job array holds at most."""
PARAM_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


class ArraySpec(_SpecModel):
    """A job array (a sweep): one application per member, each with its index and its own
    parameters in its trainers' environment, submitted together and followed as one."""

    count: int | None = Field(
        default=None, ge=1, le=MAX_ARRAY, strict=True,
        description="Members 0 to count - 1.")
    indices: list[Annotated[int, Field(ge=0, le=10 * MAX_ARRAY, strict=True)]] | None = Field(
        default=None, min_length=1, max_length=MAX_ARRAY,
        description="The members' indices, each once (`primus submit --array 0-9,20`).")
    params: list[dict[Annotated[str, Field(pattern=PARAM_NAME_PATTERN)],
                      str | int | float | bool]] | None = Field(
        default=None, min_length=1, max_length=MAX_ARRAY,
        description="One parameter set per member (member i gets the i-th), as a list of"
        " mappings, or as a mapping of each parameter to its values, all of one length"
        " ({lr: [0.1, 0.01], seed: [1, 2]}: two members): each parameter is in its trainers'"
        " environment as PRIMUS_PARAM_<NAME>, the whole set as PRIMUS_ARRAY_PARAMS (JSON).")
    max_running: int | None = Field(
        default=None, ge=1, le=MAX_ARRAY, strict=True,
        description="Members admitted (holding hosts) at once at most; the others wait as"
        " records, keeping no host from anyone (Slurm's %N). Unset: no bound.")

    @field_validator("params", mode="before")
    @classmethod
    def _columns_to_sets(cls, params: Any) -> Any:
        """``{lr: [0.1, 0.01], seed: [1, 2]}`` as ``[{lr: 0.1, seed: 1}, {lr: 0.01,
        seed: 2}]``; values of unequal lengths refused, naming them."""
        if not isinstance(params, Mapping):
            return params
        lengths = {name: len(values) if isinstance(values, list) else None
                   for name, values in params.items()}
        if any(length is None for length in lengths.values()):
            raise PydanticCustomError(
                "array_params", "a mapping of params gives each parameter a list of values"
                " (one per member); {names} {verb} not", {
                    "names": ", ".join(n for n, length in lengths.items() if length is None),
                    "verb": "is" if sum(v is None for v in lengths.values()) == 1 else "are"})
        if len(set(lengths.values())) > 1:
            raise PydanticCustomError(
                "array_params", "every parameter needs one value per member; {lengths}",
                {"lengths": ", ".join(f"{name} has {length}"
                                      for name, length in lengths.items())})
        return [dict(zip(params, values, strict=True))
                for values in zip(*params.values(), strict=True)]

    @model_validator(mode="after")
    def _one_way_to_name_members(self) -> ArraySpec:
        given = [name for name in ("count", "indices", "params") if getattr(self, name)]
        if len(given) != 1:
            raise PydanticCustomError(
                "array_members", "give exactly one of count, indices or params (got {given})",
                {"given": ", ".join(given) or "none"})
        if self.indices is not None and len(set(self.indices)) != len(self.indices):
            raise PydanticCustomError("array_indices", "indices must be unique")
        return self

    def members(self) -> list[tuple[int, dict[str, str | int | float | bool]]]:
        """Each member's index and parameters, in index order."""
        if self.params is not None:
            return list(enumerate(self.params))
        indices = sorted(self.indices) if self.indices is not None else range(self.count or 0)
        return [(index, {}) for index in indices]


def parse_array_option(text: str) -> dict[str, Any]:
    """``--array`` as an ``array`` section: ``0-199``, ``1,3,5-7``, with ``%N`` for at most
    N running (Slurm's form).

    Raises:
        ValueError: the text is none of these, saying what is allowed.
    """
    allowed = ("expected indices such as 0-199 or 1,3,5-7, optionally followed by %N for at "
               "most N running, e.g. 0-199%10")
    body, percent, limit = text.strip().partition("%")
    indices: list[int] = []
    for part in body.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"--array {text!r}: {allowed}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first >= MAX_ARRAY or len(indices) + last - first >= MAX_ARRAY:
            raise ValueError(f"--array {text!r}: a range runs upwards and an array holds at "
                             f"most {MAX_ARRAY} members")
        indices += range(first, last + 1)
    section: dict[str, Any] = {"indices": indices}
    if percent:
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError(f"--array {text!r}: %N needs a whole number N of at least 1")
        section["max_running"] = int(limit)
    return section


PARTITION_FIELDS = ("YYYY", "MM", "DD", "HH")
"""Time fields a source path may contain as ``{{YYYY}}``, ``{{MM}}``, ``{{DD}}``, ``{{HH}}``."""

STREAM_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"


FILTER_OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "not in")
"""The comparisons of a stream's ``filter`` terms."""

FilterValue = Annotated[str | int | float | bool, Field(union_mode="left_to_right")]


class TableSpec(_SpecModel):
    """A table as a stream's source: its data files at one version (Delta) or snapshot
    (Iceberg)."""

    format: Literal["delta", "iceberg"] = Field(
        description="The table's format: delta (Delta Lake) or iceberg (Apache Iceberg).")
    path: str | None = Field(
        default=None, min_length=1,
        description="delta: where the table is, its directory, as a path or an fsspec URL"
        " (relative paths are taken from the job file's directory).")
    catalog: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="iceberg: the catalog's name, as pyiceberg's configuration names it"
        " (~/.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__* variables where the job is"
        " submitted and where its AM runs; its credentials stay there, never in the job).")
    name: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$",
        description="iceberg: the table's identifier in the catalog, namespace.table.")
    version: int | None = Field(
        default=None, ge=0, strict=True,
        description="delta: the table version to read; unset: the latest when the job is"
        " submitted, which submit then records here (an AM take-over and a restart read that"
        " same version).")
    snapshot: int | None = Field(
        default=None, strict=True,
        description="iceberg: the snapshot id to read; unset: the current one when the job is"
        " submitted, recorded here as for a Delta version.")

    @model_validator(mode="after")
    def _fields_of_its_format(self) -> TableSpec:
        wanted, others = (("path",), ("catalog", "name", "snapshot")) \
            if self.format == "delta" else (("catalog", "name"), ("path", "version"))
        missing = [f for f in wanted if getattr(self, f) is None]
        extra = [f for f in others if getattr(self, f) is not None]
        if missing or extra:
            raise PydanticCustomError(
                "table_fields", "{format} tables take {wanted}{extra}",
                {"format": self.format, "wanted": " and ".join(wanted),
                 "extra": f", not {' or '.join(extra)}" if extra else ""})
        return self

    @property
    def pinned(self) -> int | None:
        """The version (delta) or snapshot (iceberg) read; ``None`` until pinned."""
        return self.version if self.format == "delta" else self.snapshot

    @property
    def pin_field(self) -> str:
        return "version" if self.format == "delta" else "snapshot"

    @property
    def location_field(self) -> str:
        return "path" if self.format == "delta" else "name"

    @property
    def location(self) -> str:
        """Where the table is, as messages name it."""
        return str(self.path) if self.format == "delta" else f"{self.name} (catalog " \
            f"{self.catalog})"

    def at(self, pinned: int) -> TableSpec:
        """This table pinned at version (or snapshot) ``pinned``."""
        return self.model_copy(update={self.pin_field: pinned})


KAFKA_TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
"""A Kafka topic's name, as Kafka allows it."""

KAFKA_CLIENT_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
"""A Kafka connection profile's name (docs/data.md, "Kafka")."""

KAFKA_TUNING = frozenset({
    "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms", "max.partition.fetch.bytes",
    "fetch.error.backoff.ms", "queued.min.messages", "queued.max.messages.kbytes",
    "receive.message.max.bytes", "socket.receive.buffer.bytes", "check.crcs",
    "session.timeout.ms", "socket.timeout.ms", "client.rack", "isolation.level"})
"""The consumer settings a job may give (``kafka.settings``): tuning only. Where the broker is,
how a client proves who it is (TLS, SASL) and its secrets belong to the connection profile,
kept where the job is submitted and read (docs/data.md)."""

KafkaOffsets = dict[Annotated[str, Field(pattern=KAFKA_TOPIC_PATTERN)],
                    dict[Annotated[int, Field(ge=0, le=2**31 - 1)],
                         Annotated[int, Field(ge=0, le=2**63 - 1)]]]
"""Offsets per partition of each topic: ``{topic: {partition: offset}}``."""


class KafkaSourceSpec(_SpecModel):
    """Topics of a Kafka cluster as a stream's source: each partition from a start to an end
    offset, pinned when the job is submitted; read by offset ranges (tasks) of one partition."""

    client: str = Field(
        pattern=KAFKA_CLIENT_PATTERN,
        description="The connection profile to reach the cluster with, by name: bootstrap"
        " servers, TLS and SASL, kept in the Kafka profiles file where the job is submitted"
        " and where its executors run ($PRIMUS_KAFKA_CLIENTS, else"
        " ~/.config/primus/kafka.yaml); never in the job.")
    topics: list[Annotated[str, Field(pattern=KAFKA_TOPIC_PATTERN)]] = Field(
        min_length=1, max_length=1000, description="The topics to read, every partition of"
        " each.")
    start: Literal["earliest", "latest"] | datetime | KafkaOffsets = Field(
        default="earliest", union_mode="left_to_right",
        description="Where each partition is read from: earliest (its first offset kept),"
        " latest (its end when the job is submitted), a time (the first record written at or"
        " after it), or offsets per partition, {topic: {partition: offset}}.")
    end: Literal["submit", "none"] | datetime | KafkaOffsets = Field(
        default="submit", union_mode="left_to_right",
        description="Where each partition's reading ends (exclusive): submit (its end when the"
        " job is submitted), a time, offsets per partition, or none (unbounded: read what"
        " arrives, partitions added later included, until the application ends, by primus"
        " succeed for one).")
    task_size: int | None = Field(
        default=None, ge=1, le=2**62, strict=True,
        description="Offsets per task: a partition is read in ranges of this many offsets,"
        " shared among executors; unset: one task per partition.")
    max_lag: int | None = Field(
        default=None, ge=1, le=2**62, strict=True,
        description="An unbounded stream (end: none): when more messages than this wait to be"
        " read (summed over the partitions), the AM records an event (and another once the lag"
        " is back under it); messages are never skipped. Unset: no limit.")
    commit_group: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]{1,249}$",
        description="A consumer group the AM mirrors the stream's position to, for Kafka's own"
        " lag tools: each partition's oldest offset not yet read, committed once etcd holds the"
        " checkpoints it comes from. Primus never reads it back. Unset: nothing is committed.")
    settings: dict[str, str | int | float | bool] = Field(
        default_factory=dict, max_length=50,
        description="Consumer tuning settings (librdkafka's names), from an allow-list:"
        " fetch.min.bytes, fetch.max.bytes, fetch.wait.max.ms, max.partition.fetch.bytes,"
        " queued.min.messages, queued.max.messages.kbytes, ...; never a server or a secret.")
    pinned: dict[Annotated[str, Field(pattern=KAFKA_TOPIC_PATTERN)],
                 dict[Annotated[int, Field(ge=0, le=2**31 - 1)],
                      tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]]] \
        | None = Field(
        default=None,
        description="Written by primus submit: each partition's [start, end) offsets as"
        " resolved then, so that an AM take-over, a restart and a savepoint restore read the"
        " same range. Not to be set by hand.")

    @model_validator(mode="after")
    def _settings_and_ranges(self) -> KafkaSourceSpec:
        self._max_lag_needs_no_end()
        refused = sorted(set(self.settings) - KAFKA_TUNING)
        if refused:
            raise PydanticCustomError(
                "kafka_setting", "settings {refused}: not a tuning setting; a job may set"
                " only {allowed} (servers, TLS, SASL and secrets belong to the client's"
                " profile)", {"refused": ", ".join(refused),
                              "allowed": ", ".join(sorted(KAFKA_TUNING))})
        for name, offsets in (("start", self.start), ("end", self.end)):
            if isinstance(offsets, dict):
                unknown = sorted(set(offsets) - set(self.topics))
                if unknown:
                    raise PydanticCustomError(
                        "kafka_offsets_topic", "{name} gives offsets of {unknown}, which"
                        " topics does not list", {"name": name, "unknown": ", ".join(unknown)})
        if isinstance(self.start, datetime) and isinstance(self.end, datetime):
            if (self.start.utcoffset() is None) != (self.end.utcoffset() is None):
                raise PydanticCustomError(
                    "time_zones_mixed", "start and end must both give a time zone or neither")
            if self.end < self.start:
                raise PydanticCustomError("time_range_reversed", "end is before start")
        if isinstance(self.start, dict) and isinstance(self.end, dict):
            for topic, ends in self.end.items():
                for partition, end in ends.items():
                    start = self.start.get(topic, {}).get(partition)
                    if start is not None and end < start:
                        raise PydanticCustomError(
                            "kafka_range_reversed", "end offset {end} of {topic} partition"
                            " {partition} is before its start offset {start}",
                            {"end": end, "start": start, "topic": topic,
                             "partition": partition})
        return self

    @property
    def unbounded(self) -> bool:
        return self.end == "none"

    def _max_lag_needs_no_end(self) -> None:
        if self.max_lag is not None and not self.unbounded:
            raise PydanticCustomError("kafka_max_lag",
                                      "max_lag is for an unbounded stream (end: none)")

    @property
    def shown(self) -> str:
        return f"kafka {', '.join(self.topics)} (client {self.client})"


class SourceSpec(_SpecModel):
    """Files of a stream: a glob pattern, optionally over a range of time partitions; or a
    table's data files (``table``); or the partitions of Kafka topics (``kafka``)."""

    path: str | None = Field(
        default=None,
        min_length=1,
        description="Glob pattern of the files (fsspec URL or path; relative paths are taken"
        " from the job file's directory), e.g. /data/train/*.txt. May contain time fields"
        " {{YYYY}}, {{MM}}, {{DD}}, {{HH}}: the pattern is then expanded for every hour (or"
        " day...) from start to end and partitions are read in time order. Either path or"
        " table.",
    )
    table: TableSpec | None = Field(
        default=None,
        description="A table instead of a pattern: its data files at a pinned version, read"
        " with format parquet.",
    )
    kafka: KafkaSourceSpec | None = Field(
        default=None,
        description="Kafka topics instead of files: each partition's messages between two"
        " offsets, read with format kafka.",
    )
    start: datetime | None = Field(
        default=None,
        description="First time partition (inclusive), e.g. 2026-11-01 or 2026-11-01T06:00;"
        " required when path has time fields.",
    )
    end: datetime | None = Field(
        default=None,
        description="Last time partition (inclusive); required when path has time fields.",
    )
    success_marker: str | None = Field(
        default=None,
        description="File name that must exist in a partition's directory before it is read,"
        " e.g. _SUCCESS; unset: read partitions as they are.",
    )
    marker_timeout: Seconds = Field(
        default=600,
        gt=0,
        description="How long to wait for a partition's success marker before the stream"
        " fails, in seconds or a duration.",
    )

    @property
    def shown(self) -> str:
        """The source as messages name it: its pattern, or its table and version."""
        if self.kafka is not None:
            return self.kafka.shown
        if self.table is None:
            return str(self.path)
        table = self.table
        pinned = "" if table.pinned is None else f" {table.pin_field} {table.pinned}"
        return f"{table.format} table {table.location}{pinned}"

    @model_validator(mode="after")
    def _time_range_matches_fields(self) -> SourceSpec:
        if (self.path, self.table, self.kafka).count(None) != 2:
            raise PydanticCustomError("path_or_table",
                                      "give one of path (a pattern), table or kafka")
        if self.kafka is not None and self.success_marker is not None:
            raise PydanticCustomError("marker_of_kafka",
                                      "success_marker is for patterns; kafka has offsets")
        if self.table is not None and self.success_marker is not None:
            raise PydanticCustomError("marker_of_table",
                                      "success_marker is for patterns; a table has versions")
        has_fields = any("{{" + name + "}}" in (self.path or "") for name in PARTITION_FIELDS)
        if has_fields and (self.start is None or self.end is None):
            raise PydanticCustomError(
                "time_range_required",
                "path has time fields ({{YYYY}}, {{MM}}, {{DD}}, {{HH}}): set start and end")
        if not has_fields and (self.start is not None or self.end is not None):
            raise PydanticCustomError(
                "time_fields_required",
                "start and end need time fields ({{YYYY}}, {{MM}}, {{DD}}, {{HH}}) in path")
        if self.start is None or self.end is None:
            return self
        if (self.start.utcoffset() is None) != (self.end.utcoffset() is None):
            raise PydanticCustomError(
                "time_zones_mixed", "start and end must both give a time zone (Z, +01:00) or"
                " neither: a time with a zone and one without cannot be compared")
        if self.end < self.start:
            raise PydanticCustomError("time_range_reversed", "end is before start")
        return self


class StreamSpec(_SpecModel):
    """A named stream of training data, read by one or more roles."""

    name: str = Field(
        pattern=STREAM_NAME_PATTERN,
        description="Stream name, unique within the job: 1 to 32 lowercase letters, digits, '_'"
        " or '-', starting with a letter.",
    )
    roles: list[str] = Field(
        min_length=1,
        description="Roles whose executors read this stream; a role reads at most one stream.",
    )
    sources: list[SourceSpec] = Field(min_length=1, description="Where the data are: files,"
                                      " a table or Kafka topics.")
    format: str = Field(
        default="text",
        description="Record format: text (lines), bytes (raw), tfrecord (length-prefixed"
        " records with checksums, verified), parquet (rows, delivered as Arrow record batches;"
        " needs pyarrow: the data extra), arrow (Arrow IPC files, as Hugging Face datasets"
        " keeps its tables: rows as Arrow record batches, a task per file), webdataset"
        " (WebDataset tar shards: a sample a record), or one an installed package offers"
        " (entry point group primus.formats).",
    )
    columns: list[Annotated[str, Field(min_length=1, max_length=MAX_COLUMN_NAME)]] | None = \
        Field(default=None, min_length=1, max_length=10_000,
              description="For a format with columns (parquet): the columns to read, in this"
              " order; unset: every column.")
    filter: list[tuple[Annotated[str, Field(min_length=1, max_length=MAX_COLUMN_NAME)],
                       Literal[FILTER_OPS],  # type: ignore[valid-type]
                       FilterValue | list[FilterValue]]] | None = Field(
        default=None, min_length=1, max_length=100,
        description="For a columnar format: only the rows for which every term [column, op,"
        " value] holds (op: =, !=, <, <=, >, >=, in, not in; a list value for in and not in);"
        " a table's files whose partition values fail a term are not read at all.")
    chunk_size: ByteCount | None = Field(
        default=None,
        gt=0,
        description="Split files into byte ranges of this size (aligned to records) so a large"
        " file is shared among executors; unset: one task per file.",
    )
    epochs: int = Field(default=1, ge=1, le=MAX_COUNT, strict=True,
                        description="How many times the whole stream is read.")
    shuffle: bool = Field(
        default=False,
        description="Shuffle the order of tasks in each epoch (from seed and the epoch number,"
        " so a run is reproducible); unset: files in sorted order, partitions in time order.",
    )
    shuffle_buffer: int | None = Field(
        default=None, ge=2, le=MAX_SHUFFLE_BUFFER, strict=True,
        description="Shuffle the records too: each reader gives its trainer a task's records"
        " in a random order (from seed), drawn within windows of this many consecutive records"
        " (at most 256 MiB of them). A restart or a savepoint resumes at the start of the"
        " window a trainer was in: its records already given are given again. Unset: records"
        " in file order.")
    seed: int = Field(default=0, ge=-(2**63), le=2**63 - 1, strict=True,
                      description="Seed of the shuffles (a signed 64-bit integer).")
    max_task_attempts: int = Field(
        default=3,
        ge=1, le=MAX_COUNT,
        strict=True,
        description="A task whose reading failed or whose reader was lost this many times is"
        " failed.",
    )
    task_success_percent: float = Field(
        default=100.0,
        ge=0,
        le=100,
        strict=True,
        description="Share of tasks, in percent, that must be done for the stream to succeed"
        " (default: 100, less task_failed_percent where that is set).",
    )
    task_failed_percent: float = Field(
        default=0.0,
        ge=0,
        le=100,
        strict=True,
        description="Share of tasks, in percent, that may fail before the application fails.",
    )
    on_unread: Literal["warn", "fail"] = Field(
        default="warn",
        description="When the application's roles have succeeded while tasks of this bounded"
        " stream were never read (its trainers ended first, e.g. one caught its reader's"
        " error): warn (it succeeds, its diagnosis and events say how much was read) or fail"
        " it.",
    )
    preprocess: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$",
        description="A Python function, module:function, applied to every record before it"
        " is delivered (decoding, filtering): it gets a record's data (a pyarrow.RecordBatch"
        " for parquet) and returns the new data, or None to drop the record. It runs in a"
        " process of its own with the trainer's environment and working directory; a record"
        " it fails on fails its task.",
    )
    delivery: Literal["stdin", "fifo", "shm"] = Field(
        default="stdin",
        description="How records reach the trainer: on its stdin, through a named pipe whose"
        " path is in PRIMUS_DATA_FIFO, or through shared memory (shm), read with"
        " primus.data.reader.",
    )
    checkpoint_records: int = Field(
        default=10_000,
        ge=1, le=MAX_COUNT,
        strict=True,
        description="Checkpoint a task's progress to etcd after this many records...",
    )
    checkpoint_interval: Seconds = Field(
        default=5,
        gt=0,
        description="...or after this long, whichever comes first.",
    )
    prefetch: int = Field(
        default=1,
        ge=0,
        le=16,
        strict=True,
        description="Tasks an executor claims ahead of the one it feeds (0 to 16).",
    )

    @property
    def unbounded(self) -> bool:
        """Whether the stream reads an unbounded Kafka source (``end: none``): it has no last
        task, and ends when told."""
        return any(source.kafka is not None and source.kafka.unbounded
                   for source in self.sources)

    @model_validator(mode="before")
    @classmethod
    def _done_share_from_failed_share(cls, data: Any) -> Any:
        """A stream that says what share of its tasks may fail, and not what share must be
        done, means the rest must be: ``task_success_percent`` is then 100 less
        ``task_failed_percent`` (at 100 it failed the application at its first failed task,
        whatever ``task_failed_percent`` allowed). Not for an unbounded stream, which has no
        done share."""
        if not isinstance(data, dict) or "task_success_percent" in data:
            return data
        failed = data.get("task_failed_percent")
        sources = data.get("sources")
        unbounded = isinstance(sources, list) and any(
            isinstance(source, dict) and isinstance(source.get("kafka"), dict)
            and source["kafka"].get("end") == "none" for source in sources)
        if isinstance(failed, int | float) and not isinstance(failed, bool) \
                and 0 < failed <= 100 and not unbounded:
            return {**data, "task_success_percent": 100.0 - failed}
        return data

    @model_validator(mode="before")
    @classmethod
    def _kafka_format_by_default(cls, data: Any) -> Any:
        """A stream of Kafka sources alone is read with format kafka unless it says otherwise
        (which the check after refuses)."""
        if isinstance(data, dict) and "format" not in data:
            sources = data.get("sources")
            if isinstance(sources, list) and sources and all(
                    isinstance(source, dict) and "kafka" in source for source in sources):
                return {**data, "format": "kafka"}
        return data

    @model_validator(mode="after")
    def _kafka_fields(self) -> StreamSpec:
        kafka = [source.kafka for source in self.sources if source.kafka is not None]
        if not kafka:
            if self.format == "kafka":
                raise PydanticCustomError("kafka_format", "format kafka is for kafka sources")
            return self
        if len(kafka) != len(self.sources):
            raise PydanticCustomError("kafka_mixed",
                                      "a stream reads kafka sources alone, or none")
        if self.format != "kafka":
            raise PydanticCustomError("kafka_format", "a stream of kafka sources has format"
                                      " kafka (each message's value, offset, key...)")
        for name in ("chunk_size", "columns", "filter"):
            if getattr(self, name) is not None:
                raise PydanticCustomError(
                    "kafka_field", "{name} is not for kafka sources (a kafka source's tasks"
                    " are sized by its task_size)", {"name": name})
        if self.unbounded:
            for name, value, default in (("epochs", self.epochs, 1),
                                         ("shuffle", self.shuffle, False),
                                         ("shuffle_buffer", self.shuffle_buffer, None),
                                         ("task_success_percent", self.task_success_percent,
                                          100.0)):
                if value != default:
                    raise PydanticCustomError(
                        "kafka_unbounded", "{name} is not for an unbounded stream (end: none),"
                        " which has no last task", {"name": name})
        return self


def url_problem(url: object) -> str | None:
    """Why ``url`` cannot be a webhook's; ``None`` when it can."""
    if not isinstance(url, str) or len(url) > MAX_URL:
        return f"must be an http:// or https:// URL of at most {MAX_URL} characters"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if parts.username or parts.password:
        return "must not hold credentials (every delivery is signed instead)"
    return None


class WebhookSpec(_SpecModel):
    """One of a job's webhooks: where the server posts the events it asks for."""

    url: str = Field(description="An http:// or https:// URL the server posts JSON to, signed"
                     " with the application's own key (primus notify-key).")
    events: list[Literal["app_state", "hang", "admission_wait", "array_end"]] = Field(
        default=["app_state", "hang", "admission_wait", "array_end"], min_length=1,
        description="What it is told of: app_state (each change of the application's state),"
        " hang (a hang of its trainers, with where the ranks stood), admission_wait (it waits"
        " for admission longer than the site's notify.admission_wait), array_end (every member"
        " of its job array has ended: once per array, with how many ended in each state).")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        problem = url_problem(url)
        if problem is not None:
            raise PydanticCustomError("webhook_url", problem)
        return url


class JobSpec(_SpecModel):
    """A whole job: its roles, the environment they share and the supervision policy."""

    name: str = Field(
        pattern=JOB_NAME_PATTERN,
        description="Job name: 1 to 63 lowercase letters, digits, '_', '.' or '-', starting with a"
        " letter or digit.",
    )
    roles: list[RoleSpec] = Field(
        min_length=1, description="The job's roles; their names must be unique."
    )
    env: Env = Field(
        default={},
        description="Environment variables for the trainers of every role; a role's own env wins."
        " Numbers are turned into text.",
    )
    secret_env: list[Annotated[str, Field(pattern=ENV_NAME_PATTERN)]] = Field(
        default=[],
        description="Names of environment variables taken from the submitter's environment and"
        " given to every trainer, carried only in process environments: never written to etcd,"
        " to a log or to a command line (tokens, passwords).",
    )
    policy: PolicySpec = Field(default=PolicySpec(), description="Supervision policy.")
    workdir: str | None = Field(
        default=None,
        description="Directory the trainers run in, on every host; a relative path is taken from"
        " the job file's directory. Unset: the job file's directory when the application runs on"
        " the submitting host, else the application's work directory on each host"
        " (<primus_home>/apps/<app>/work), where `files` are copied.",
    )
    files: list[str] = Field(
        default=[],
        description="Files and directories copied into the application's work directory on every"
        " inventory host before launch; relative paths are taken from the job file's directory.",
    )
    placement: Literal["spread", "pack"] = Field(
        default="spread",
        description="How executors are placed on hosts: spread (fewest executors first) or pack"
        " (fill a host before the next).",
    )
    placement_domain: str | None = Field(
        default=None, pattern=DOMAIN_LEVEL_PATTERN,
        description="A level of the site's host domains (its topology.levels, such as rack):"
        " every executor of the application is placed in one domain of that level (hosts whose"
        " primus_domains give the same value), or the application waits. Unset: anywhere.",
    )
    placement_domain_preferred: str | None = Field(
        default=None, pattern=DOMAIN_LEVEL_PATTERN,
        description="A level whose one domain the executors should share where one can take"
        " them all (finer than placement_domain, when both are set); else placed as"
        " placement_domain says.",
    )
    am: AmSpec = Field(default=AmSpec(), description="Where the application master runs.")
    start: StartSpec = Field(default=StartSpec(),
                             description="How trainers start: gang, dynamic or ordered.")
    data: list[StreamSpec] = Field(
        default=[],
        description="Training data streams: files split into tasks that executors claim and"
        " feed to their trainers.",
    )
    from_savepoint: str | None = Field(
        default=None,
        pattern=SAVEPOINT_PATTERN,
        description="Start the data streams from a savepoint, APP/NUMBER (`primus savepoint"
        " list APP`): no record before its cut is read again, none after it is skipped. The"
        " streams must be those the savepoint holds, with the same sources and settings;"
        " `primus submit --from-savepoint APP/NUMBER` sets it.",
    )
    savepoints_kept: int = Field(
        default=16, ge=1, le=1000, strict=True,
        description="Savepoints of the data streams kept for this application: once one more"
        " is taken, the oldest is deleted (each holds a cut of every stream's tasks).",
    )
    queue: str | None = Field(
        default=None,
        pattern=QUEUE_NAME_PATTERN,
        description="The admission queue (docs/scheduling.md): one the site configuration"
        " defines; unset: its default queue. `primus submit --queue Q` sets it.",
    )
    preemptible: bool = Field(
        default=False,
        description="Whether the application may be stopped to admit one of a higher priority"
        " that cannot otherwise fit; it is then queued again, not failed.",
    )
    array: ArraySpec | None = Field(
        default=None,
        description="Submit the job as an array of applications, one per member (a sweep):"
        " `primus submit --array 0-199%10` sets it (docs/scheduling.md, job arrays).",
    )
    notify: list[WebhookSpec] = Field(
        default=[], max_length=8,
        description="Webhooks the server tells of this application's state changes, hangs and"
        " long admission waits (at most 8; docs/observability.md).",
    )

    @model_validator(mode="after")
    def _streams_name_known_roles(self) -> JobSpec:
        problems = []
        if self.array is not None and self.from_savepoint is not None:
            problems.append(InitErrorDetails(
                type=PydanticCustomError(
                    "array_from_savepoint", "must be unset in a job array: every member would"
                    " restore the same streams"),
                loc=("from_savepoint",), input=self.from_savepoint))
        names = {role.name for role in self.roles}
        reader: dict[str, str] = {}
        seen: set[str] = set()
        for i, role in enumerate(self.roles):
            if role.hang_timeout is not None and role.hang_timeout < self.policy.heartbeat_ttl:
                problems.append(InitErrorDetails(
                    type=PydanticCustomError(
                        "hang_timeout_below_heartbeat",
                        "must be at least policy.heartbeat_ttl ({ttl}s): a trainer is not"
                        " called hung sooner than its executor could be called lost",
                        {"ttl": f"{self.policy.heartbeat_ttl:g}"}),
                    loc=("roles", i, "hang_timeout"), input=role.hang_timeout))
        for i, stream in enumerate(self.data):
            if stream.name in seen:
                problems.append(InitErrorDetails(
                    type=PydanticCustomError("duplicate_stream_name",
                                             "must be unique among data streams"),
                    loc=("data", i, "name"), input=stream.name))
            seen.add(stream.name)
            for j, role_name in enumerate(stream.roles):
                if role_name not in names:
                    problems.append(InitErrorDetails(
                        type=PydanticCustomError("unknown_role", "no such role; roles: {roles}",
                                                 {"roles": ", ".join(sorted(names))}),
                        loc=("data", i, "roles", j), input=role_name))
                elif role_name in reader:
                    problems.append(InitErrorDetails(
                        type=PydanticCustomError(
                            "role_reads_two_streams",
                            "role {role} already reads stream {other}; a role reads at most"
                            " one stream", {"role": role_name, "other": reader[role_name]}),
                        loc=("data", i, "roles", j), input=role_name))
                else:
                    reader[role_name] = stream.name
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, problems)
        return self

    def stream_of(self, role: str) -> StreamSpec | None:
        """The data stream ``role`` reads, if any."""
        return next((s for s in self.data if role in s.roles), None)

    @field_validator("roles")
    @classmethod
    def _role_names_are_unique(cls, roles: list[RoleSpec]) -> list[RoleSpec]:
        first_with_name: dict[str, int] = {}
        duplicates = []
        for index, role in enumerate(roles):
            first = first_with_name.setdefault(role.name, index)
            if first != index:
                # Raised as a ValidationError so that the error points at roles[index].name.
                duplicates.append(
                    InitErrorDetails(
                        type=PydanticCustomError(
                            "duplicate_role_name",
                            "must be unique among roles; roles[{first}] has the same name",
                            {"first": first},
                        ),
                        loc=(index, "name"),
                        input=role.name,
                    )
                )
        if duplicates:
            raise ValidationError.from_exception_data(cls.__name__, duplicates)
        if sum(role.num for role in roles) > MAX_EXECUTORS:
            raise PydanticCustomError(
                "too_many_executors", "the roles' num add up to {total}; a job has at most"
                " {most} executors", {"total": sum(role.num for role in roles),
                                      "most": MAX_EXECUTORS})
        return roles

    def role(self, name: str) -> RoleSpec:
        """Return the role called ``name``.

        Raises:
            KeyError: If the job has no such role.
        """
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(f"job {self.name!r} has no role {name!r}")

    @property
    def total_executors(self) -> int:
        """Number of executors over all roles."""
        return sum(role.num for role in self.roles)


def job_schema() -> dict[str, Any]:
    """Return the JSON schema of a job file, with every field's description."""
    return JobSpec.model_json_schema()
