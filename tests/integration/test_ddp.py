"""The PyTorch DDP example trained across two real sshd hosts, with gloo over their network."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support.apps import status_json
from tests.support.primus import REPO, run_primus

DDP = REPO / "examples" / "pytorch-ddp" / "job.yaml"


@pytest.fixture(scope="session")
def torch():
    """torch, which the trainer needs: missing, it fails the test naming what to install."""
    try:
        import torch
    except ImportError as exc:
        pytest.fail(f"the DDP example needs torch in {sys.executable} (the ddp extra: "
                    f"pip install -e '.[test,ddp]', as scripts/bootstrap --test does): {exc}")
    return torch


def test_ddp_workers_on_two_hosts_train_to_identical_parameters(torch, ssh_testbed, primus_env,
                                                                tmp_path):
    env, cluster = ssh_testbed.env(primus_env), ssh_testbed.cluster
    out = tmp_path / "out"  # the test hosts share this machine's filesystem
    # A list command runs without a shell; as JSON it is a YAML flow sequence for --set.
    command = json.dumps([sys.executable, "train.py", "--out", str(out)])
    result = run_primus(env, "submit", str(DDP), "-i", str(cluster.inventory), "--wait",
                        "--set", f"roles.worker.command={command}",
                        "--set", "roles.worker.max_per_host=1")
    assert result.returncode == 0, result.stderr
    app_id = result.stdout.strip()

    status = status_json(env, app_id)
    assert status["status"]["state"] == "SUCCEEDED"
    placed = {e["plan"]["index"]: e["plan"]["host"] for e in status["executors"]["worker"]}
    assert placed == {0: "h1", 1: "h2"}
    logs = run_primus(env, "logs", app_id).stdout
    for rank in (0, 1):
        assert f"[worker-{rank}] rank {rank}/2: 5 epochs" in logs, logs

    written = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert [(w["rank"], w["world_size"]) for w in written] == [(0, 2), (1, 2)]
    initial = [torch.tensor(w["initial"]) for w in written]
    final = [torch.tensor(w["final"]) for w in written]
    assert torch.equal(initial[0], initial[1]), "DDP starts every rank from rank 0's parameters"
    assert torch.equal(final[0], final[1]), "averaged gradients keep the replicas identical"
    assert not torch.allclose(final[0], initial[0]), "training changed the parameters"
    assert {h.name: h.app_pids() for h in cluster.hosts} == {h.name: [] for h in cluster.hosts}
