"""Hypothesis settings of the fuzz suite: a fixed budget, and the same examples on every run.

The examples are derived from each test's name instead of a random seed and no example database
is kept, by hand as in CI, so a failure is reproduced by running the same test again.
``PRIMUS_FUZZ_EXAMPLES`` raises the number of examples of each property, and
``PRIMUS_FUZZ_RANDOM=1`` draws new inputs on each run (keeping failing ones in ``.hypothesis/``),
to search further (docs/testing.md).
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import Phase, settings

EXAMPLES = int(os.environ.get("PRIMUS_FUZZ_EXAMPLES", "50"))

settings.register_profile(
    "primus-fuzz",
    max_examples=EXAMPLES,
    # A backstop against a hang: each test asserts its own, clearer bound (checks.SECONDS, in
    # CPU time) on the code under test. This one is wall time: it also counts writing the
    # example's files, a second, untraced run of an example that was slow while its memory was
    # traced, and the waits of a machine whose cores the other test workers share (one example
    # took 13 s of wall time in a full run on 2 cores).
    deadline=timedelta(seconds=60),
    # Not the explain phase: it traces every line run (sys.settrace, on Python 3.11), which makes
    # PyYAML some hundred times slower, so that the time bound fails on what is not slow.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    print_blob=True,
)
settings.register_profile("primus-fuzz-fixed", parent=settings.get_profile("primus-fuzz"),
                          derandomize=True, database=None)
settings.load_profile("primus-fuzz" if os.environ.get("PRIMUS_FUZZ_RANDOM") == "1"
                      else "primus-fuzz-fixed")
