"""A PyTorch DDP trainer (gloo, CPU) whose rank 1 stops taking part after one all_reduce: rank 1
waits in ``wait_for_ever`` while rank 0 waits for it in the next ``all_reduce``. Neither prints
or reports progress after that: a hang (test_ddp.py)."""

import time

import torch
import torch.distributed as dist


def wait_for_ever() -> None:
    while True:
        time.sleep(1)


def main() -> None:
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    values = torch.ones(4)
    dist.all_reduce(values)
    print(f"rank {rank}: first all_reduce done ({values[0].item():g})", flush=True)
    if rank == 1:
        wait_for_ever()
    dist.all_reduce(values)


if __name__ == "__main__":
    main()
