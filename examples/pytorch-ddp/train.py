"""A small PyTorch DDP training on CPU (gloo), configured from the environment Primus gives it.

``init_method="env://"`` reads ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``. Every
rank fits the same tiny MLP to its share of one synthetic regression data set, then writes its
parameters before and after training to ``OUT/rank-<rank>.json``. DDP averages the gradients, so
all ranks end with the same parameters.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SEED = 0
FEATURES = 8
SAMPLES = 512


def synthetic_regression() -> TensorDataset:
    """The same data set on every rank: ``y = x @ w + noise`` from a fixed seed."""
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=generator)
    y = x @ w + 0.01 * torch.randn(SAMPLES, 1, generator=generator)
    return TensorDataset(x, y)


def flat_parameters(model: nn.Module) -> list[float]:
    """Every parameter of ``model`` in one flat list, in the order ``parameters()`` gives."""
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("DDP_OUT", "ddp-out")),
                        help="directory for rank-<rank>.json (default: $DDP_OUT, else ddp-out)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo", init_method="env://")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(SEED)  # DDP broadcasts rank 0's parameters anyway; this makes runs repeatable
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1)))
    initial = flat_parameters(model)
    dataset = synthetic_regression()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=SEED)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    losses = []  # this rank's mean loss of each epoch
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces (averages) the gradients here
            optimizer.step()
            total += loss.item()
        losses.append(total / len(loader))

    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"rank-{rank}.json"
    path.write_text(json.dumps({"rank": rank, "world_size": world_size, "losses": losses,
                                "initial": initial, "final": flat_parameters(model)}))
    print(f"rank {rank}/{world_size}: {args.epochs} epochs, loss "
          + " -> ".join(f"{loss:.3f}" for loss in losses[:1] + losses[-1:])
          + f", parameters written to {path}", flush=True)
    # Every rank reaches the teardown together: a rank that tears its gloo pairs down while
    # another is still using them can abort ("terminate called without an active exception").
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
