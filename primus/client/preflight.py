"""Pre-flight checks of a loaded job: everything that can be refused before anything is written.

``primus spec check`` runs :func:`check_job` without hosts; ``primus submit`` runs it with the
application's hosts, which adds the checks that need them. So a file that ``spec check`` accepts
is refused at submit only for a reason :data:`CHECKED_AT_SUBMIT` names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from primus.config.inventory import Host
from primus.config.loader import MAX_SPEC_BYTES, NO_VALUE, SpecError, SpecProblem
from primus.config.spec import JobSpec
from primus.scheduler.placement import am_host, place
from primus.state.records import encode_hosts

CHECKED_AT_SUBMIT = ("the hosts: reachable over SSH, the same Primus, room for every executor "
                     "(placement), workdir; the data sources: patterns match files")
"""What :func:`check_job` checks only when it is given the hosts, in words."""

MAX_HOSTS_BYTES = MAX_SPEC_BYTES // 2
"""The inventory as stored with an application: with the job, within one etcd request."""


def check_job(job_file: str, spec: JobSpec, hosts: Sequence[Host] | None = None) -> JobSpec:
    """Refuse a job that cannot run, naming the file, the field and what is allowed.

    Without ``hosts``, what holds wherever the job runs: files to copy exist here,
    ``secret_env`` variables are set, data formats are installed. With ``hosts``, also what
    :data:`CHECKED_AT_SUBMIT` lists that needs no connection (reachability is
    :func:`primus.client.hosts.ready_hosts`'s).

    Returns:
        The spec, with the job file's directory as ``workdir`` when every host is this one and
        the job names none.

    Raises:
        SpecError: With every problem found.
    """
    problems = [SpecProblem(job_file, f"files[{i}]", path, "must be an existing file or "
                            "directory on the submitting host")
                # os.path's test: a name past 255 bytes is no file, where Path.exists() raises
                for i, path in enumerate(spec.files) if not os.path.exists(path)]
    problems += [SpecProblem(job_file, f"secret_env[{i}]", name,
                             "must be set in the environment of `primus submit`")
                 for i, name in enumerate(spec.secret_env) if name not in os.environ]
    if spec.data:  # imported only for jobs with data: fsspec takes a while to import
        from primus.data.formats import UnknownFormatError, get_format  # noqa: PLC0415
        for index, stream in enumerate(spec.data):
            try:
                get_format(stream.format)
            except UnknownFormatError as exc:
                problems.append(SpecProblem(job_file, f"data[{index}].format", stream.format,
                                            str(exc)))
    if hosts is not None:
        spec, more = _check_on_hosts(job_file, spec, hosts)
        problems += more
    if problems:
        raise SpecError(*problems)
    if hosts is not None:
        place(spec, hosts)  # raises, naming the role and resource, if the inventory cannot fit
        am_host(spec, hosts)
    return spec


def _check_on_hosts(job_file: str, spec: JobSpec, hosts: Sequence[Host]
                    ) -> tuple[JobSpec, list[SpecProblem]]:
    problems = []
    if all(host.launcher == "local" for host in hosts):
        if spec.workdir is None:
            spec = spec.model_copy(update={"workdir": str(Path(job_file).resolve().parent)})
        if not os.path.isdir(str(spec.workdir)):
            problems.append(SpecProblem(job_file, "workdir", spec.workdir,
                                        "must be an existing directory on this host"))
    stored = len(encode_hosts(hosts))
    if stored > MAX_HOSTS_BYTES:
        problems.append(SpecProblem(
            job_file, "", NO_VALUE, f"its inventory of {len(hosts):,} hosts would be stored as "
            f"{stored:,} bytes; an application's hosts are at most {MAX_HOSTS_BYTES:,} bytes "
            "(select a group with fewer hosts)"))
    if spec.data:
        from primus.data.sources import check_sources  # noqa: PLC0415
        base = Path(job_file).resolve().parent
        for index, stream in enumerate(spec.data):
            problems += [SpecProblem(job_file, problem.field, problem.value, problem.why)
                         for problem in check_sources(stream, base, index)]
    return spec, problems
