"""How many tasks an executor claims in one transaction (``claim_batch_size``)."""

from __future__ import annotations

import pytest

from primus.data.tasks import CLAIM_BATCH, CLAIM_HORIZON, CLAIM_SHARE, claim_batch_size


def test_a_reader_whose_pace_is_not_known_yet_claims_one_task():
    assert claim_batch_size(64, None) == 1


def test_a_fast_reader_among_many_pending_tasks_claims_a_full_batch():
    assert claim_batch_size(64, 0.001) == CLAIM_BATCH


@pytest.mark.parametrize("pace", [CLAIM_HORIZON, 10 * CLAIM_HORIZON])
def test_a_reader_taking_the_horizon_or_longer_per_task_claims_one(pace):
    assert claim_batch_size(64, pace) == 1


def test_a_batch_covers_what_the_reader_reads_within_the_horizon():
    assert claim_batch_size(64, CLAIM_HORIZON / 3) == 3


@pytest.mark.parametrize(("window", "expected"), [(0, 1), (1, 1), (2 * CLAIM_SHARE - 1, 1),
                                                   (3 * CLAIM_SHARE, 3)])
def test_a_batch_takes_at_most_a_share_of_the_pending_tasks_seen(window, expected):
    assert claim_batch_size(window, 0.001) == expected
