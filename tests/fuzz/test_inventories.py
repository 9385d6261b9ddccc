"""Fuzzed inventories (Ansible INI and YAML, with group_vars/ and host_vars/ files beside them) and
hostfiles: each loads as hosts or is refused with a one-line error naming its file, in bounded
time and memory."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from primus.config.inventory import Inventory, InventoryError, load_inventory
from tests.fuzz.checks import assert_clear_inventory_error, example_dir, run_bounded, write
from tests.fuzz.strategies import (
    group_names,
    hostfiles,
    ini_inventories,
    inventory_names,
    inventory_texts,
    vars_files,
    yaml_inventories,
)

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:Generating overly large repr")]


def load_or_refuse(text: str | bytes, name: str, files: dict[str, str],
                   group: str | None) -> None:
    with example_dir() as directory:
        path = write(directory, name, text)
        for relative, content in files.items():
            write(directory, relative, content)

        outcome = run_bounded(lambda: load_inventory(path, group), InventoryError)

        if isinstance(outcome, InventoryError):
            assert_clear_inventory_error(outcome, directory)
        else:
            assert isinstance(outcome, Inventory) and outcome.hosts
            assert all(host.name and host.address for host in outcome.hosts)


# Inputs that ended in another exception than InventoryError; each was fixed in
# primus/config/inventory.py and is tried first on every run.
@example(text="[" + "x" * 300 + "]\nh\n", name="hosts", files={}, group=None)  # OSError: a
# group_vars/ file name past 255 bytes (found by the suite)
@example(text="[g]\nh:" + "9" * 5_000 + "\n", name="hosts", files={}, group=None)  # ValueError:
# a port of 5,000 digits (found while writing the suite)
@example(text="[g]\nh\n[g:vars]\nansible_group_priority=1e999\n", name="hosts", files={},
         group=None)  # OverflowError: int(inf) (found while writing the suite)
@example(text="".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(1_100)) + "[g1100]\nh\n",
         name="hosts", files={}, group=None)  # RecursionError: groups nested 1,100 deep (found
# while writing the suite)
@example(text="[g]\n/\n", name="hosts", files={}, group=None)  # a host named / made host_vars/
# lookups walk the whole file system: a hang (found by the suite)
@given(text=ini_inventories(), name=st.sampled_from(("hosts", "inventory.ini")),
       files=vars_files, group=st.one_of(st.none(), group_names))
def test_ini_inventory_loads_or_is_refused_with_a_clear_error(text, name, files, group):
    load_or_refuse(text, name, files, group)


@example(text="_: null\n/dev/zero: null\n", name="inventory.yml", files={}, group=None)  # a
# group name read as the path of its group_vars file: /etc/passwd was printed in the error (found
# by the suite)
@example(text='"a\\nb": {foo: 1}\n', name="inventory.yml", files={}, group=None)  # a group name
# with a line break printed one problem on two lines (found while writing the suite)
@given(text=yaml_inventories(), name=st.sampled_from(("inventory.yml", "inventory.json", "hosts")),
       files=vars_files, group=st.one_of(st.none(), group_names))
def test_yaml_inventory_loads_or_is_refused_with_a_clear_error(text, name, files, group):
    load_or_refuse(text, name, files, group)


@given(text=hostfiles())
def test_hostfile_loads_or_is_refused_with_a_clear_error(text):
    load_or_refuse(text, "hostfile", {}, None)


@given(text=inventory_texts(), name=inventory_names)
def test_any_inventory_text_loads_or_is_refused_with_a_clear_error(text, name):
    load_or_refuse(text, name, {}, None)


@given(data=st.binary(max_size=2_000), name=inventory_names)
def test_inventory_of_random_bytes_loads_or_is_refused_with_a_clear_error(data, name):
    load_or_refuse(data, name, {}, None)
