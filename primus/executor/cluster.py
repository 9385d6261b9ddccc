"""The trainer's environment contract, computed from the cluster spec. Pure functions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from primus.config.spec import JobSpec
from primus.state.records import ClusterMember, ClusterSpec


def rank_order(spec: JobSpec) -> list[tuple[str, int]]:
    """Every executor as ``(role, index)`` in global rank order: roles as listed, then index."""
    return [(role.name, index) for role in spec.roles for index in range(role.num)]


def build_cluster(spec: JobSpec, attempt: int,
                  registered: Mapping[tuple[str, int], tuple[str, Sequence[int], int]],
                  version: int = 1) -> ClusterSpec:
    """The cluster spec of the executors that registered their ``(address, ports, attempt)``:
    every one of the job under the gang start policy, those so far under dynamic and ordered
    (each keeps its rank in the whole job's order, so a later member changes nobody's).

    ``attempt`` is the application's attempt, ``version`` counts the specs written in it (a
    restarted executor's new address or ports, or a new member, make a new version). The
    PyTorch master is the lowest-ranked executor that reserved a port.
    """
    members = []
    for rank, (role, index) in enumerate(rank_order(spec)):
        if (role, index) not in registered:
            continue
        address, ports, executor_attempt = registered[(role, index)]
        members.append(ClusterMember(role=role, index=index, rank=rank, address=address,
                                     ports=list(ports), attempt=executor_attempt))
    master = next((m for m in members if m.ports), members[0])
    return ClusterSpec(attempt=attempt, members=members, master_addr=master.address,
                       master_port=master.ports[0] if master.ports else 0, version=version)


def trainer_env(app_id: str, role: str, index: int, attempt: int, cluster: ClusterSpec
                ) -> dict[str, str]:
    """The variables every trainer gets (see docs/architecture.md, "Trainer contract")."""
    me = next(m for m in cluster.members if m.role == role and m.index == index)
    tf_cluster: dict[str, list[str]] = {}
    for member in cluster.members:
        if member.ports:
            tf_cluster.setdefault(member.role, []).append(f"{member.address}:{member.ports[0]}")
    same_host = [m for m in cluster.members if m.address == me.address]
    return {
        "PRIMUS_APP_ID": app_id,
        "PRIMUS_ROLE": role,
        "PRIMUS_INDEX": str(index),
        "PRIMUS_ATTEMPT": str(attempt),
        "PRIMUS_APP_ATTEMPT": str(cluster.attempt),
        "PRIMUS_CLUSTER_VERSION": str(cluster.version),
        "PRIMUS_PORTS": ",".join(str(p) for p in me.ports),
        "PRIMUS_HOST": me.address,
        "TF_CONFIG": json.dumps({"cluster": tf_cluster, "task": {"type": role, "index": index}},
                                separators=(",", ":")),
        "MASTER_ADDR": cluster.master_addr,
        "MASTER_PORT": str(cluster.master_port),
        "WORLD_SIZE": str(len(cluster.members)),
        "RANK": str(me.rank),
        "LOCAL_RANK": str(same_host.index(me)),
        "LOCAL_WORLD_SIZE": str(len(same_host)),
    }


def gpu_env(wanted: int, devices: Sequence[int]) -> dict[str, str]:
    """The variables that give a trainer exactly its GPU devices (its reservation's indices
    on its host); none for a role that asks for no GPU."""
    if not wanted:
        return {}
    visible = ",".join(str(device) for device in devices)
    return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": visible}
