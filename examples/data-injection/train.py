"""A trainer that consumes its data stream from stdin: one example per line.

It reads until Primus closes its input (the stream is exhausted), then reports what it saw.
"""

import hashlib
import os
import sys

me = f"{os.environ['PRIMUS_ROLE']}-{os.environ['PRIMUS_INDEX']}"
examples = positives = 0
digest = hashlib.sha256()
for line in sys.stdin.buffer:
    key, label, _text = line.rstrip(b"\n").split(b"\t", 2)
    examples += 1
    positives += label == b"1"
    digest.update(key)
print(f"{me} (attempt {os.environ['PRIMUS_ATTEMPT']}) trained on {examples} examples, "
      f"{positives} positive; keys digest {digest.hexdigest()[:12]}")
