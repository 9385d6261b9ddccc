"""A trainer that reads its rows as Arrow record batches: Primus's reader library, on stdin.

It reads until Primus closes its input (the stream is exhausted), then reports what it saw.
"""

import os

from primus.data.reader import arrow_batches

me = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}"
rows = positives = 0
for batch in arrow_batches():
    rows += batch.num_rows
    positives += sum(batch.column("label").to_pylist())
print(f"{me} (attempt {os.environ['PRIMUS_ATTEMPT']}) trained on {rows} rows, "
      f"{positives} positive")
