"""A trainer for the chaos tests that leaves evidence of every attempt it runs.

    python trainer.py RECORDS [--code C --fail-until N]

On start it appends a line to ``RECORDS/starts.jsonl`` (role, index, attempt, app attempt, pid,
time) and takes an exclusive ``flock`` on ``RECORDS/locks/<role>-<index>``; the kernel drops the
lock when the process dies, however it dies. If the lock is already held, another trainer of the
same executor index is still running: that is recorded in ``RECORDS/overlaps.jsonl``, which the
tests require to stay empty.

With ``--code C``, attempts below ``--fail-until`` (or every attempt, if not given) exit with
code C at once. Otherwise it runs until ``RECORDS/GO`` exists, then exits 0. With
``--term-delay S`` it takes S seconds to exit after SIGTERM, still holding its lock, as a trainer
saving a checkpoint does.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("records", type=Path)
    parser.add_argument("--code", type=int)
    parser.add_argument("--fail-until", type=int, default=sys.maxsize,
                        help="attempts from this one on behave normally")
    parser.add_argument("--app-attempts", action="store_true",
                        help="count application attempts instead of executor attempts")
    parser.add_argument("--term-delay", type=float, default=0.0,
                        help="seconds to go on after SIGTERM before exiting with 143")
    args = parser.parse_args()
    if args.term_delay:
        def save_checkpoint_then_exit(_signum: int, _frame: object) -> None:
            time.sleep(args.term_delay)
            sys.exit(143)
        signal.signal(signal.SIGTERM, save_checkpoint_then_exit)
    me = {"role": os.environ["PRIMUS_ROLE"], "index": int(os.environ["PRIMUS_INDEX"]),
          "attempt": int(os.environ["PRIMUS_ATTEMPT"]),
          "app_attempt": int(os.environ["PRIMUS_APP_ATTEMPT"]), "pid": os.getpid(),
          "time": time.time()}
    locks = args.records / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = open(locks / f"{me['role']}-{me['index']}", "w")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        with open(args.records / "overlaps.jsonl", "a") as out:
            out.write(json.dumps(me) + "\n")
    with open(args.records / "starts.jsonl", "a") as out:
        out.write(json.dumps(me) + "\n")
    attempt = me["app_attempt"] if args.app_attempts else me["attempt"]
    if args.code is not None and attempt < args.fail_until:
        return args.code
    while not (args.records / "GO").exists():
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
