"""Each application's budget of etcd: what is counted to whom, and when it is past its budget
(``primus/client/budgets.py``)."""

from __future__ import annotations

from primus.client.budgets import BudgetFold, Usage, over_budget
from primus.config.queues import Budget
from primus.state.records import AppOwner, encode

P = "/primus"


def test_every_key_of_an_application_and_its_admission_keys_count_to_it_and_only_those():
    fold = BudgetFold(P)
    assert fold.put(f"{P}/apps/a/status", b"x" * 10) == "a"
    assert fold.put(f"{P}/scheduler/apps/a/request", b"y" * 5) == "a"
    assert fold.put(f"{P}/scheduler/hosts/h1", b"{}") == ""
    assert fold.put(f"{P}/apps/b/status", b"") == "b"
    status, request = len(f"{P}/apps/a/status") + 10, len(f"{P}/scheduler/apps/a/request") + 5
    assert fold.usage["a"] == Usage(keys=2, bytes=status + request)


def test_a_rewrite_counts_its_new_size_once_and_a_delete_gives_it_back():
    fold = BudgetFold(P)
    key = f"{P}/apps/a/data/s/tasks/1-1"
    fold.put(key, b"x" * 100)
    fold.put(key, b"x" * 40)
    assert fold.usage["a"] == Usage(keys=1, bytes=len(key) + 40)
    fold.put(f"{P}/apps/a/status", b"")
    fold.delete(key)
    fold.delete(key)  # the read and the watch may both bring it
    assert fold.usage["a"] == Usage(keys=1, bytes=len(f"{P}/apps/a/status"))
    fold.delete(f"{P}/apps/a/status")
    assert "a" not in fold.usage


def test_the_owner_record_is_read_as_it_is_counted():
    fold = BudgetFold(P)
    owner = AppOwner(app_id="a", name="a", user="bob", account="bob", queue="big",
                     submit_time=1.0)
    fold.put(f"{P}/apps/a/owner", encode(owner))
    fold.put(f"{P}/apps/a/owner-not", encode(owner))
    assert fold.owners == {"a": owner}


def test_past_either_bound_says_which_and_by_how_much():
    budget = Budget(keys=10, bytes=1000)
    assert over_budget(Usage(keys=10, bytes=1000), budget) == ""
    assert over_budget(Usage(keys=11, bytes=5), budget) == "11 keys, over its budget of 10"
    assert over_budget(Usage(keys=12, bytes=2048), budget) == (
        "12 keys, over its budget of 10; 2,048 bytes, over its budget of 1,000")
    assert over_budget(Usage(keys=10**9, bytes=10**12), Budget()) == ""
