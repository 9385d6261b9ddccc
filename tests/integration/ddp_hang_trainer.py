"""A PyTorch DDP trainer (gloo, CPU) whose rank 1 stops taking part after one all_reduce: rank 1
waits in ``wait_for_ever`` while rank 0 waits for it in the next ``all_reduce``. Until the
first all_reduce is done, a thread reports progress (importing torch on a busy machine takes
seconds of silence); after it, neither rank prints or reports anything: a hang
(test_ddp.py)."""

import threading
import time

import primus.progress

setting_up = threading.Event()


def report_while_setting_up() -> None:
    while not setting_up.wait(0.5):
        primus.progress.report()


threading.Thread(target=report_while_setting_up, daemon=True).start()

import torch  # noqa: E402 - after the progress reports start
import torch.distributed as dist  # noqa: E402


def wait_for_ever() -> None:
    while True:
        time.sleep(1)  # rank 1 stands here


def main() -> None:
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    values = torch.ones(4)
    dist.all_reduce(values)
    print(f"rank {rank}: first all_reduce done ({values[0].item():g})", flush=True)
    setting_up.set()
    if rank == 1:
        wait_for_ever()  # rank 1 calls it here
    dist.all_reduce(values)  # rank 0 waits here


if __name__ == "__main__":
    main()
