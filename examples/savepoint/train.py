"""A trainer that reads its records through shared memory with Primus's reader library and, at
its "model checkpoint", asks for a savepoint of the data where it is.

Every worker asks at the same step with the same name, as data-parallel trainers save their
model at the same step; Primus takes one savepoint once both have asked. A run started from it
(``primus submit job.yaml --from-savepoint APP/1``) has nothing to save again: its trainers
only read on.
"""

import os

from primus.data.reader import records, savepoint

CHECKPOINT_AT = 1000
"""Records read before the (first and only) model checkpoint."""

me = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}"
resumed = os.environ.get("PRIMUS_APP_ID", "")  # said in the log only
read = positives = 0
saved = ""
for record in records():
    read += 1
    positives += record.split(b"\t")[1] == b"1"
    if read == CHECKPOINT_AT:
        # Here a trainer would save its model, with the savepoint's id beside it.
        saved = savepoint("first-checkpoint")
        print(f"{me}: model checkpoint at record {read}, data savepoint {saved}", flush=True)
print(f"{me} read {read} records, {positives} positive" +
      (f"; savepoint {saved}" if saved else ""), flush=True)
