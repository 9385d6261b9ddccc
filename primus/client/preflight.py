"""Pre-flight checks of a loaded job: everything that can be refused before anything is written.

``primus spec check`` runs :func:`check_job` without hosts; ``primus submit`` runs it with the
application's hosts, which adds the checks that need them. So a file that ``spec check`` accepts
is refused at submit only for a reason :data:`CHECKED_AT_SUBMIT` names. Both check the job
against the site's queues (:func:`check_queue`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from primus.client.hosts import discover_gpus, owner_account
from primus.config.inventory import Host
from primus.config.loader import MAX_SPEC_BYTES, NO_VALUE, SpecError, SpecProblem
from primus.config.notify import NotifyPolicy
from primus.config.queues import QueuesConfig
from primus.config.site import Settings
from primus.config.spec import JobSpec
from primus.launcher.api import LaunchError
from primus.launcher.registry import Launchers
from primus.scheduler.gpu_topology import Link, choose_devices, topology_of
from primus.scheduler.placement import PlacementError, am_host, am_hosts, place
from primus.state.records import encode_hosts

CHECKED_AT_SUBMIT = ("the hosts: reachable over SSH, the same Primus, room for every executor "
                     "(placement), GPU devices declared where a role asks for GPUs, workdir; "
                     "the data sources: patterns match files")
"""What :func:`check_job` checks only when it is given the hosts, in words."""

MAX_HOSTS_BYTES = MAX_SPEC_BYTES // 2
"""The inventory as stored with an application: with the job, within one etcd request."""


def check_job(job_file: str, spec: JobSpec, hosts: Sequence[Host] | None = None,
              queues: QueuesConfig | None = None, *, through_api: bool = False,
              notify: NotifyPolicy | None = None, domain_levels: Sequence[str] = ()
              ) -> JobSpec:
    """Refuse a job that cannot run, naming the file, the field and what is allowed.

    Without ``hosts``, what holds wherever the job runs: files to copy exist here,
    ``secret_env`` variables are set, data formats are installed, its queue exists in
    ``queues`` (the site's; ``None``: the built-in ``default`` alone) and its quotas let it
    in (:func:`check_queue`), its webhooks point where the site's ``notify.job_urls`` (of
    ``notify``) allow, its ``placement_domain`` levels are the site's (``domain_levels``). With
    ``hosts``, also what
    :data:`CHECKED_AT_SUBMIT` lists that needs no connection (reachability is
    :func:`primus.client.hosts.ready_hosts`'s).

    ``through_api``: the job came to an API server, which reads nothing of its own host for
    it. Its files and secret values travel in the request and are checked there; it has no
    directory on the hosts (``workdir`` stays unset: the work directory, where its files are
    copied); its data sources are checked where its AM lists them
    (:func:`check_data_on_am_host`, which :func:`checked_submission` runs).

    Returns:
        The spec, with the job file's directory as ``workdir`` when every host is this one and
        the job names none.

    Raises:
        SpecError: With every problem found.
    """
    problems = [] if through_api else [
        SpecProblem(job_file, f"files[{i}]", path, "must be an existing file or directory on "
                    "the submitting host")
        # os.path's test: a name past 255 bytes is no file, where Path.exists() raises
        for i, path in enumerate(spec.files) if not os.path.exists(path)]
    problems += [] if through_api else [
        SpecProblem(job_file, f"secret_env[{i}]", name,
                    "must be set in the environment of `primus submit`")
        for i, name in enumerate(spec.secret_env) if name not in os.environ]
    if spec.data:  # imported only for jobs with data: fsspec takes a while to import
        import primus.data.formats  # noqa: F401, PLC0415 - registers the built-in formats
        from primus.data.api import DataError, get_format  # noqa: PLC0415
        for index, stream in enumerate(spec.data):
            try:
                fmt = get_format(stream.format)
            except DataError as exc:  # unknown, or its package cannot be loaded
                problems.append(SpecProblem(job_file, f"data[{index}].format", stream.format,
                                            str(exc)))
                continue
            if stream.columns is not None and not fmt.columnar:
                problems.append(SpecProblem(
                    job_file, f"data[{index}].columns", ", ".join(stream.columns),
                    f"format {stream.format} has no columns; only a columnar format (parquet) "
                    "takes columns"))
            if stream.filter is not None and not fmt.columnar:
                problems.append(SpecProblem(
                    job_file, f"data[{index}].filter", stream.format,
                    f"format {stream.format} has no columns to filter on; only a columnar "
                    "format (parquet) takes a filter"))
            if stream.shuffle_buffer is not None and not fmt.shuffles:
                problems.append(SpecProblem(
                    job_file, f"data[{index}].shuffle_buffer", str(stream.shuffle_buffer),
                    f"format {stream.format} cannot tell its records apart to shuffle them" + (
                        " (a block of a bytes stream is its record)"
                        if stream.format == "bytes" else "")))
            if any(s.table for s in stream.sources) and stream.format != "parquet":
                problems.append(SpecProblem(
                    job_file, f"data[{index}].format", stream.format,
                    "must be parquet: the stream reads a table, whose data files are Parquet"))
        if not spec.from_savepoint:  # else the tables are read at the savepoint's versions
            spec, pinning = _pin_tables(job_file, spec, through_api)
            problems += pinning
            spec, pinning = _pin_kafka(job_file, spec, through_api)
            problems += pinning
    problems += check_queue(job_file, spec, queues or QueuesConfig())
    problems += _check_domain_levels(job_file, spec, domain_levels)
    problems += [SpecProblem(job_file, f"notify[{i}].url", hook.url, url_problem)
                 for i, hook in enumerate(spec.notify)
                 if (url_problem := (notify or NotifyPolicy()).job_url_problem(hook.url))]
    if hosts is not None:
        spec, more = _check_on_hosts(job_file, spec, hosts, through_api)
        problems += more
    if problems:  # a table found wrong when pinned is found wrong again on the hosts: once
        once: dict[tuple[str, str, str, str], SpecProblem] = {}
        for problem in problems:
            once.setdefault((problem.source, problem.field, str(problem.value),
                             problem.allowed), problem)
        raise SpecError(*once.values())
    if hosts is not None:
        place(spec, hosts)  # raises, naming the role and resource, if the inventory cannot fit
        am_host(spec, hosts)
        _check_domain_fits(job_file, spec, hosts)
    return spec


def _check_domain_levels(job_file: str, spec: JobSpec, levels: Sequence[str]
                         ) -> list[SpecProblem]:
    """A ``placement_domain`` (or its preferred) naming a level the site does not define, or a
    preferred one coarser than the required one."""
    problems = []
    for field in ("placement_domain", "placement_domain_preferred"):
        level = getattr(spec, field)
        if level is not None and level not in levels:
            problems.append(SpecProblem(job_file, field, level, (
                f"the site's levels of host domains are {', '.join(levels)}" if levels else
                "the site defines no levels of host domains (topology.levels in its file)")))
    required, preferred = spec.placement_domain, spec.placement_domain_preferred
    if not problems and required and preferred and \
            levels.index(preferred) < levels.index(required):
        problems.append(SpecProblem(job_file, "placement_domain_preferred", preferred, (
            f"must be {required} or a level finer than it (the site's levels, coarse to fine: "
            f"{', '.join(levels)})")))
    return problems


def _check_domain_fits(job_file: str, spec: JobSpec, hosts: Sequence[Host]) -> None:
    """Refuse a job whose ``placement_domain`` no domain of ``hosts`` could ever hold whole
    (every host empty), naming what each domain falls short of."""
    level = spec.placement_domain
    if level is None:
        return
    groups: dict[str, list[Host]] = {}
    for host in hosts:
        if (name := host.domain(level)) is not None:
            groups.setdefault(name, []).append(host)
    why = []
    for name, members in sorted(groups.items()):
        try:
            place(spec, members)
            return
        except PlacementError as exc:
            why.append(f"{level} {name} ({', '.join(h.name for h in members)}): {exc}")
    raise SpecError(SpecProblem(job_file, "placement_domain", level, (
        f"no {level} of its hosts can take every executor of the job: " + "; ".join(why[:3]) +
        (f"; and {len(why) - 3} more" if len(why) > 3 else "") if why else
        f"none of its hosts names its {level} (primus_domains in the inventory)")))


def _pin_tables(job_file: str, spec: JobSpec,
                through_api: bool) -> tuple[JobSpec, list[SpecProblem]]:
    """``spec`` with each table source's version set (the latest, unless the job names one,
    which must exist), and the problems found. Through the API the server does not read the
    owner's tables: a table source must name its version there."""
    problems: list[SpecProblem] = []
    streams = list(spec.data)
    for index, stream in enumerate(streams):
        sources = list(stream.sources)
        for j, source in enumerate(sources):
            if source.table is None:
                continue
            field = f"data[{index}].sources[{j}].table"
            table = source.table
            if through_api:
                if table.pinned is None:
                    problems.append(SpecProblem(
                        job_file, f"{field}.{table.pin_field}", NO_VALUE, "must be set when the "
                        "job is submitted through the server, which does not read the owner's "
                        "data (primus submit with etcd reached directly pins the latest itself)"))
                continue
            from primus.data.tables import TableError, pin  # noqa: PLC0415 - table sources

            try:
                sources[j] = source.model_copy(update={"table": pin(table)})
            except TableError as exc:
                problems.append(SpecProblem(
                    job_file, f"{field}.{table.pin_field}", table.pinned, exc.reason)
                    if exc.about_pin else SpecProblem(
                    job_file, f"{field}.{table.location_field}", table.location, exc.reason))
        streams[index] = stream.model_copy(update={"sources": sources})
    return spec.model_copy(update={"data": streams}) if spec.data else spec, problems


def kafka_pins(job_file: str, spec: JobSpec) -> list[str]:
    """``--set`` overrides that pin the job's Kafka sources as this host resolves them (its
    owner's profiles), for a submit through the API server, which reads no owner's profile:
    ``data.0.sources.1.kafka={...}``, the source with its partitions' offsets. None when the
    job reads no Kafka.

    Raises:
        SpecError: a profile, a topic or an offset is wrong (as a direct submit says it).
    """
    if not any(source.kafka is not None and source.kafka.pinned is None
               for stream in spec.data for source in stream.sources):
        return []
    pinned, problems = _pin_kafka(job_file, spec, through_api=False)
    if problems:
        raise SpecError(*problems)
    return [f"data.{index}.sources.{j}.kafka="
            f"{json.dumps(source.kafka.model_dump(mode='json', exclude_defaults=True))}"
            for index, stream in enumerate(pinned.data)
            for j, source in enumerate(stream.sources)
            if source.kafka is not None and source.kafka.pinned is not None]


def _pin_kafka(job_file: str, spec: JobSpec,
               through_api: bool) -> tuple[JobSpec, list[SpecProblem]]:
    """``spec`` with each Kafka source's partitions and their ``[start, end)`` offsets resolved
    now (``kafka.pinned``), and the problems found: a profile, a topic or an offset that is
    wrong, or a source with no message in its range. Through the API the server reads no
    owner's profile: the source must come pinned (``primus submit`` pins it itself, with etcd
    reached directly or through a server: :func:`kafka_pins`)."""
    problems: list[SpecProblem] = []
    streams = list(spec.data)
    for index, stream in enumerate(streams):
        sources = list(stream.sources)
        for j, source in enumerate(sources):
            if source.kafka is None or source.kafka.pinned is not None:
                continue
            field = f"data[{index}].sources[{j}].kafka"
            if through_api:
                problems.append(SpecProblem(
                    job_file, f"{field}.client", source.kafka.client, "Kafka offsets are "
                    "resolved where the job is submitted with etcd reached directly: the server "
                    "reads no owner's Kafka profile"))
                continue
            from primus.data.kafka import KafkaSourceError, pin  # noqa: PLC0415 - Kafka only

            try:
                pinned = pin(source.kafka)
            except KafkaSourceError as exc:
                given = getattr(source.kafka, exc.field, None)
                value = exc.value or (given if isinstance(given, str) else
                                      str(given) if given is not None else NO_VALUE)
                problems.append(SpecProblem(job_file, f"{field}.{exc.field}", value,
                                            exc.reason))
                continue
            if not pinned.unbounded and not any(
                    end > start for ranges in (pinned.pinned or {}).values()
                    for start, end in ranges.values()):
                problems.append(SpecProblem(
                    job_file, f"{field}.topics", ", ".join(source.kafka.topics),
                    "hold no message between start and end: nothing to read"))
                continue
            sources[j] = source.model_copy(update={"kafka": pinned})
        streams[index] = stream.model_copy(update={"sources": sources})
    return spec.model_copy(update={"data": streams}) if spec.data else spec, problems


async def checked_submission(source: str, spec: JobSpec, hosts: Sequence[Host],
                             settings: Settings, *, through_api: bool = False, user: str = ""
                             ) -> tuple[JobSpec, list[Host]]:
    """The job and its hosts as a submission records them, whoever submits (``primus submit``,
    the API's ``SubmitApplication``): GPU devices that no inventory entry declares found with
    ``nvidia-smi`` where a role asks for GPUs, then every check of :func:`check_job`.

    Raises:
        SpecError: As :func:`check_job`; nothing was written.
    """
    if any(role.gpu for role in spec.roles):
        hosts = await discover_gpus(settings, hosts)
    spec = check_job(source, spec, hosts, settings.queues, through_api=through_api,
                     notify=settings.notify, domain_levels=settings.domain_levels)
    if through_api and spec.data:
        await check_data_on_am_host(source, spec, hosts, settings,
                                    owner_account(settings, user) if user else "")
    return spec, list(hosts)


async def check_data_on_am_host(source: str, spec: JobSpec, hosts: Sequence[Host],
                                settings: Settings, account: str = "") -> None:
    """The data sources of a job through the API checked where its AM lists them (its AM
    host, over its launcher, as ``account`` where it runs as its owner's: what the owner
    cannot read there is refused), not on the server's host: each source without time fields
    must match a file there.

    Raises:
        SpecError: Naming each source refused, or the host that could not check them.
    """
    host = am_hosts(spec, hosts)[0]
    launchers = Launchers(settings)
    try:
        found = await launchers.for_host(host, account).check_data(
            host, [(index, stream.model_dump(mode="json"))
                   for index, stream in enumerate(spec.data)])
    except LaunchError as exc:
        raise SpecError(SpecProblem(source, "data", NO_VALUE, (
            f"its sources could not be checked on {host.name}, where the AM lists them: "
            f"{exc}"))) from exc
    finally:
        await launchers.close()
    if found:
        raise SpecError(*(SpecProblem(source, problem["field"], problem["value"],
                                      f"{problem['why']} on {host.name}") for problem in found))


def check_queue(job_file: str, spec: JobSpec, queues: QueuesConfig) -> list[SpecProblem]:
    """What keeps the job out of its queue for ever: the queue (``queue``, else the default
    one) does not exist, or the whole job needs more than a quota of the queue, or of one user
    in it, allows (a quota of 0 applications admits none)."""
    name = spec.queue or queues.default_queue
    if name not in queues.queues:
        return [SpecProblem(job_file, "queue", name, "no such queue; queues: " +
                            ", ".join(sorted(queues.queues)))]
    queue = queues.queues[name]
    members = len(spec.array.members()) if spec.array is not None else 0
    if queue.max_array is not None and members > queue.max_array:
        return [SpecProblem(job_file, "array", f"{members} members", (
            f"queue {name}'s max_array is {queue.max_array}: submit at most that many members "
            f"at once (or to another queue)"))]
    needs = {"gpus": sum(role.gpu * role.num for role in spec.roles),
             "cpu": sum(role.cpu * role.num for role in spec.roles),
             "executors": sum(role.num for role in spec.roles), "applications": 1}
    problems = []
    for whose, quota in (("quota", queue.quota), ("user_quota", queue.user_quota)):
        for resource, need in needs.items():
            limit = getattr(quota, resource)
            if limit is not None and need > limit:
                problems.append(SpecProblem(job_file, "queue", name, (
                    f"queue {name}'s {whose}.{resource} is {limit:g}, the job needs {need:g} "
                    f"{resource} at once: it could never be admitted (submit a smaller job, or "
                    f"to another queue)")))
    return problems


def _check_gpus(job_file: str, spec: JobSpec, hosts: Sequence[Host]) -> list[SpecProblem]:
    """Roles asking for GPUs where no host they may use declares GPU devices."""
    problems = []
    for index, role in enumerate(spec.roles):
        usable = [host for host in hosts
                  if not role.hosts or set(role.hosts) & (host.groups | host.labels)]
        if role.gpu and usable and not any(host.gpus for host in usable):
            problems.append(SpecProblem(
                job_file, f"roles[{index}].gpu", role.gpu,
                f"no host role {role.name} may use ({', '.join(h.name for h in usable)}) "
                f"declares GPU devices; declare them in the inventory (primus_gpus) or ask "
                f"for gpu: 0"))
        elif role.gpu and usable and role.gpu_locality != "any":
            within = Link[role.gpu_locality.upper()]
            offered = {host.name: _largest_block(host, within) for host in usable}
            if not any(block >= role.gpu for block in offered.values()):
                problems.append(SpecProblem(
                    job_file, f"roles[{index}].gpu_locality", role.gpu_locality,
                    f"role {role.name} asks {role.gpu} GPUs linked at {role.gpu_locality} or "
                    f"closer; its hosts offer at most: " + ", ".join(
                        f"{name} {block}" if block >= 0 else f"{name} none (no "
                        f"primus_gpu_topology)" for name, block in offered.items())))
        if role.cpu_binding == "numa" and usable and not any(
                (topology := topology_of(host)) is not None and topology.numa
                for host in usable):
            problems.append(SpecProblem(
                job_file, f"roles[{index}].cpu_binding", role.cpu_binding,
                f"no host role {role.name} may use names its GPUs' NUMA nodes (the inventory's "
                f"primus_gpu_topology); set it, or cpu_binding: none"))
    return problems


def _largest_block(host: Host, within: Link) -> int:
    """The most GPUs of ``host`` linked at ``within`` or closer, all free; -1 where its
    topology is unknown."""
    topology = topology_of(host)
    if topology is None:
        return -1
    return max(size for size in range(topology.gpus + 1)
               if size == 0 or choose_devices(topology, range(topology.gpus), size, within))


def _check_on_hosts(job_file: str, spec: JobSpec, hosts: Sequence[Host], through_api: bool
                    ) -> tuple[JobSpec, list[SpecProblem]]:
    problems = []
    if all(host.launcher == "local" for host in hosts) and (spec.workdir or not through_api):
        if spec.workdir is None:  # a job through the API has no directory here
            spec = spec.model_copy(update={"workdir": str(Path(job_file).resolve().parent)})
        if not os.path.isdir(str(spec.workdir)):
            problems.append(SpecProblem(job_file, "workdir", spec.workdir,
                                        "must be an existing directory on this host"))
    problems += _check_gpus(job_file, spec, hosts)
    stored = len(encode_hosts(hosts))
    if stored > MAX_HOSTS_BYTES:
        problems.append(SpecProblem(
            job_file, "", NO_VALUE, f"its inventory of {len(hosts):,} hosts would be stored as "
            f"{stored:,} bytes; an application's hosts are at most {MAX_HOSTS_BYTES:,} bytes "
            "(select a group with fewer hosts)"))
    if spec.data and not through_api:
        from primus.data.sources import check_sources  # noqa: PLC0415
        base = Path(job_file).resolve().parent
        for index, stream in enumerate(spec.data):
            problems += [SpecProblem(job_file, problem.field, problem.value, problem.why)
                         for problem in check_sources(stream, base, index)]
    return spec, problems
