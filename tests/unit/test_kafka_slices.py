"""Where an unbounded Kafka stream's next slice of a partition ends (``data/tasks.py``): whole
tasks at once, the rest once it has lingered, so that a trickle of messages makes a task per
linger rather than one per look at the partition."""

from __future__ import annotations

import pytest

from primus.data.tasks import slice_end


@pytest.mark.parametrize(("start", "high", "task_size", "lingered", "end"), [
    (100, 100, 40, True, 100),     # nothing new
    (100, 190, 40, False, 180),    # two whole tasks now, the 10 left wait
    (100, 190, 40, True, 190),     # ...until they lingered
    (100, 130, 40, False, 100),    # no whole task: all wait
    (100, 130, None, False, 100),  # one task per slice: it waits to grow
    (100, 130, None, True, 130),
])
def test_a_slice_ends_at_whole_tasks_until_the_rest_lingered(start, high, task_size, lingered,
                                                             end):
    assert slice_end(start, high, task_size, lingered) == end
