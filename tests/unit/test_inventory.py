"""Inventory files: Ansible INI and YAML, hostfiles, and the hosts Primus makes of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from primus.config.inventory import Host, InventoryError, SshSettings, load_inventory
from primus.errors import PrimusError

Files = dict[str, str]


def write(tmp_path: Path, text: str, name: str = "hosts", files: Files | None = None) -> Path:
    """Write the inventory ``name`` and ``files`` beside it (``{"group_vars/gpu.yml": ...}``)."""
    for relative, content in {name: text, **(files or {})}.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(content)
    return tmp_path / name


def load(tmp_path: Path, text: str, name: str = "hosts", group: str | None = "all",
         files: Files | None = None) -> dict[str, Host]:
    inventory = load_inventory(write(tmp_path, text, name, files), group=group)
    return {host.name: host for host in inventory.hosts}


def error(tmp_path: Path, text: str, name: str = "hosts", group: str | None = "all",
          files: Files | None = None) -> InventoryError:
    with pytest.raises(InventoryError) as caught:
        load(tmp_path, text, name, group, files)
    return caught.value


# Which format a file is in.


@pytest.mark.parametrize("name", ["cluster.yml", "cluster.yaml", "inventory"])
def test_yaml_suffix_or_a_yaml_mapping_is_read_as_ansible_yaml(tmp_path: Path, name: str) -> None:
    hosts = load(tmp_path, "all:\n  hosts:\n    gpu01:\n      primus_slots: 2\n", name)
    assert hosts["gpu01"].slots == 2


def test_json_file_is_read_as_ansible_yaml_even_with_tabs(tmp_path: Path) -> None:
    text = json.dumps({"all": {"hosts": {"gpu01": {"ansible_port": 2222}}}}, indent="\t")
    assert load(tmp_path, text, "cluster.json")["gpu01"].ssh.port == 2222


def test_file_with_a_section_is_read_as_ansible_ini(tmp_path: Path) -> None:
    hosts = load(tmp_path, "gpu01:2222\n[gpu]\ngpu02 slots=4\n")
    assert hosts["gpu01"].ssh.port == 2222
    assert hosts["gpu02"].slots is None  # "slots" is just an Ansible variable here


def test_file_with_slot_counts_is_read_as_hostfile(tmp_path: Path) -> None:
    hosts = load(tmp_path, "gpu01 slots=4\ngpu02:8\n", "hostfile")
    assert [(h.name, h.slots) for h in hosts.values()] == [("gpu01", 4), ("gpu02", 8)]


def test_ini_suffix_reads_host_colon_number_as_a_port(tmp_path: Path) -> None:
    assert load(tmp_path, "gpu01:2222\n", "cluster.ini")["gpu01"].ssh.port == 2222


def test_plain_list_of_names_is_read_as_ansible_ini(tmp_path: Path) -> None:
    hosts = load(tmp_path, "gpu01\ngpu02 ansible_user=bob\n")
    assert hosts["gpu02"].ssh.user == "bob"
    assert hosts["gpu01"].slots is None


# Ansible INI.


def test_ini_hosts_before_any_section_are_ungrouped(tmp_path: Path) -> None:
    hosts = load(tmp_path, "login\n[gpu]\ngpu01\n")
    assert hosts["login"].groups == {"all", "ungrouped"}
    assert hosts["gpu01"].groups == {"all", "gpu"}


def test_ini_ungrouped_host_listed_in_a_group_is_no_longer_ungrouped(tmp_path: Path) -> None:
    assert load(tmp_path, "gpu01\n[gpu]\ngpu01\n")["gpu01"].groups == {"all", "gpu"}


def test_ini_hosts_of_all_are_ungrouped(tmp_path: Path) -> None:
    assert load(tmp_path, "[all]\nlogin\n")["login"].groups == {"all", "ungrouped"}


def test_ini_group_vars_apply_to_every_member(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[gpu]\ngpu01\ngpu02\n[gpu:vars]\nprimus_gpus=8\n")
    assert [host.gpus for host in hosts.values()] == [8, 8]


def test_ini_children_nest_and_hosts_belong_to_every_ancestor(tmp_path: Path) -> None:
    text = "[a100]\ngpu01\n[gpu:children]\na100\n[primus:children]\ngpu\n"
    assert load(tmp_path, text)["gpu01"].groups == {"all", "primus", "gpu", "a100"}


def test_ini_children_may_name_a_group_declared_further_down(tmp_path: Path) -> None:
    text = "[primus:children]\ngpu\n[gpu:vars]\nprimus_slots=2\n[gpu]\ngpu01\n"
    hosts = load(tmp_path, text, group="primus")
    assert hosts["gpu01"].slots == 2


def test_ini_inline_values_are_python_literals(tmp_path: Path) -> None:
    text = ("gpu01 primus_slots=4 primus_cpu=2.5 ansible_user=\"'007'\" primus_home='/my dir'"
            " primus_labels=\"['a', 'b']\" ansible_port=0x8AE\n")
    host = load(tmp_path, text)["gpu01"]
    assert (host.slots, host.cpu, host.ssh.user, host.home) == (4, 2.5, "007", "/my dir")
    assert (host.labels, host.ssh.port) == ({"a", "b"}, 2222)


def test_ini_vars_section_values_are_python_literals_and_keep_inline_hashes(
        tmp_path: Path) -> None:
    text = "[gpu]\ngpu01\n[gpu:vars]\nprimus_slots = 4\nprimus_home=/data # not a comment\n"
    host = load(tmp_path, text)["gpu01"]
    assert (host.slots, host.home) == (4, "/data # not a comment")


def test_ini_comment_after_host_is_ignored(tmp_path: Path) -> None:
    text = "; a comment\n# another\ngpu01 primus_slots=2 # primus_slots=3\n"
    assert load(tmp_path, text)["gpu01"].slots == 2


def test_ini_host_port_suffix_sets_ansible_port(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[gpu]\ngpu01:2222\n[ipv6]\n[fe80::1]:2022\n")
    assert (hosts["gpu01"].ssh.port, hosts["fe80::1"].ssh.port) == (2222, 2022)


def test_ini_host_port_counts_only_where_the_host_first_appears(tmp_path: Path) -> None:
    assert load(tmp_path, "[a]\ngpu01:2222\n[b]\ngpu01:3333\n")["gpu01"].ssh.port == 2222


@pytest.mark.parametrize(("pattern", "names"), [
    ("gpu[01:04].example", ["gpu01.example", "gpu02.example", "gpu03.example", "gpu04.example"]),
    ("gpu[1:10:3]", ["gpu1", "gpu4", "gpu7", "gpu10"]),
    ("gpu[:2]", ["gpu0", "gpu1", "gpu2"]),
    ("node[a:c]", ["nodea", "nodeb", "nodec"]),
    ("node[a:e:2]", ["nodea", "nodec", "nodee"]),
    ("r[1:2]n[a:b]", ["r1na", "r1nb", "r2na", "r2nb"]),
    ("10.0.0.[1:3]", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
])
def test_host_range_expands_as_ansible_does(tmp_path: Path, pattern: str,
                                            names: list[str]) -> None:
    assert list(load(tmp_path, f"[gpu]\n{pattern}\n")) == names


@pytest.mark.parametrize(("pattern", "allowed"), [
    ("gpu[4:1]", "begin must not be greater than end"),
    ("gpu[c:a]", "begin must not come after end"),
    ("gpu[1:c]", "both whole numbers or both single letters"),
    ("gpu[01:100]", "as many digits"),
    ("gpu[1:4:0]", "step must be a whole number >= 1"),
    ("gpu[1:]", "must be [begin:end] or [begin:end:step]"),
    ("gpu[1]", "must be [begin:end] or [begin:end:step]"),
    ("gpu[1:2", "must be [begin:end] or [begin:end:step]"),
])
def test_range_with_bad_bounds_is_refused_with_its_line(tmp_path: Path, pattern: str,
                                                        allowed: str) -> None:
    caught = error(tmp_path, f"[gpu]\n{pattern}\n")
    assert caught.line == 2
    assert pattern in str(caught) and allowed in str(caught)


@pytest.mark.parametrize(("text", "line", "message"), [
    ("[gpu:hosts]\n[gpu:members]\n", 2, "section [gpu:members] has an unknown type 'members'"),
    ("[gpu nodes]\n", 1, "invalid section [gpu nodes]"),
    ("[gpu]\ngpu01\n[gpu:vars]\nprimus_slots\n", 4, "a line of [gpu:vars] is key=value"),
    ("[gpu]\ngpu01 primus_slots\n", 2, "host gpu01: got 'primus_slots'; after the host name"),
    ("[gpu]\ngpu01 ansible_user='bob\n", 2, "cannot split"),
    ("[primus:children]\ngpu nodes\n", 2, "a line of [primus:children] is one group name"),
    ("[primus:children]\ngpu\n", 2, "group gpu: is never declared"),
    ("[gpu:vars]\nprimus_slots=2\n", 1, "group gpu: is never declared"),
    ("[gpu]\ngpu01:\n", 2, "invalid host name 'gpu01:'"),
    ("---\nall:\n", 1, "invalid host name '---'"),
])
def test_malformed_ini_is_refused_naming_file_and_line(tmp_path: Path, text: str, line: int,
                                                        message: str) -> None:
    caught = error(tmp_path, text, "cluster.ini")
    assert caught.line == line
    assert str(caught).startswith(f"{tmp_path / 'cluster.ini'}:{line}: ")
    assert message in str(caught)


def test_cycle_in_ini_children_is_refused_naming_a_link_and_its_line(tmp_path: Path) -> None:
    text = "[a:children]\nb\n[b:children]\nc\n[c:children]\na\n"
    caught = error(tmp_path, text)
    links = {2: ("a", "b"), 4: ("b", "c"), 6: ("c", "a")}  # any link of the cycle, with its line
    parent, child = links[caught.line]
    assert f"group {parent}: cannot have '{child}' as a child" in str(caught)
    assert "cycle" in str(caught)


def test_group_as_its_own_child_is_refused(tmp_path: Path) -> None:
    assert "cycle" in str(error(tmp_path, "[a:children]\na\n"))


# Ansible YAML.


YAML = """\
all:
  vars:
    primus_slots: 1
  hosts:
    login:
  children:
    primus:
      children:
        gpu:
          hosts:
            gpu[01:02]:
              primus_gpus: 8
            "gpu09:2222":
          vars:
            primus_slots: 4
        cpu:
          hosts: cpu01
"""


def test_yaml_inventory_reads_hosts_children_and_vars(tmp_path: Path) -> None:
    hosts = load(tmp_path, YAML, "cluster.yml")
    assert list(hosts) == ["login", "gpu01", "gpu02", "gpu09", "cpu01"]
    assert hosts["login"].groups == {"all", "ungrouped"}
    assert hosts["gpu01"].groups == {"all", "primus", "gpu"}
    assert (hosts["gpu01"].slots, hosts["gpu01"].gpus) == (4, 8)
    assert (hosts["gpu09"].ssh.port, hosts["cpu01"].slots) == (2222, 1)


def test_yaml_group_may_be_listed_under_several_parents(tmp_path: Path) -> None:
    text = ("all:\n  children:\n    a:\n      children:\n        gpu:\n          hosts: gpu01\n"
            "    b:\n      children:\n        gpu:\n          hosts: gpu02\n")
    hosts = load(tmp_path, text, "cluster.yml", group="b")
    assert list(hosts) == ["gpu01", "gpu02"]
    assert hosts["gpu01"].groups == {"all", "a", "b", "gpu"}


@pytest.mark.parametrize(("text", "message"), [
    ("all:\n  host:\n    gpu01:\n", "group all: unknown key 'host'; allowed: hosts, children,"),
    ("all:\n  hosts:\n    1234:\n", "host 1234 must be a string"),
    ("all:\n  hosts: [gpu01]\n", "group all: hosts must be a mapping"),
    ("all:\n  hosts:\n    gpu01: 4\n", "host gpu01: got 4; a host maps its variables"),
    ("all:\n  children:\n    gpu: [gpu01]\n", "group gpu: got ['gpu01']; a group maps"),
    ("- gpu01\n- gpu02\n", "a YAML inventory is a mapping of groups"),
    ("all:\n  hosts:\n    gpu[3:1]:\n", "host range [3:1] in 'gpu[3:1]'"),
])
def test_malformed_yaml_is_refused_naming_file_and_group_or_host(tmp_path: Path, text: str,
                                                                  message: str) -> None:
    caught = error(tmp_path, text, "cluster.yml")
    assert str(caught).startswith(f"{tmp_path / 'cluster.yml'}: ")
    assert message in str(caught)


def test_cycle_in_yaml_children_is_refused(tmp_path: Path) -> None:
    text = "a:\n  children:\n    b:\n      children:\n        a:\n"
    assert "group a: cannot have 'b' as a child" in str(error(tmp_path, text, "cluster.yml"))


def test_invalid_yaml_is_refused_naming_its_line(tmp_path: Path) -> None:
    caught = error(tmp_path, "all:\n  hosts:\n    gpu01: {\n", "cluster.yml")
    assert caught.line == 4 and "invalid YAML" in str(caught)


# Variable precedence, as Ansible has it.


def test_host_vars_win_over_group_vars(tmp_path: Path) -> None:
    assert load(tmp_path, "[gpu]\ngpu01 primus_slots=1\n[gpu:vars]\nprimus_slots=8\n")[
        "gpu01"].slots == 1


def test_child_group_vars_win_over_parent_group_vars_which_win_over_all(tmp_path: Path) -> None:
    text = ("[a100]\ngpu01\n[gpu:children]\na100\n[gpu]\ngpu02\n"
            "[a100:vars]\nprimus_slots=1\n[gpu:vars]\nprimus_slots=2\nprimus_gpus=2\n"
            "[all:vars]\nprimus_slots=3\nprimus_gpus=3\nprimus_cpu=3\n")
    hosts = load(tmp_path, text)
    assert [(h.slots, h.gpus, h.cpu) for h in hosts.values()] == [(1, 2, 3), (2, 2, 3)]


def test_sibling_groups_are_layered_by_name_the_last_winning(tmp_path: Path) -> None:
    text = "[b]\ngpu01\n[a]\ngpu01\n[a:vars]\nprimus_slots=1\n[b:vars]\nprimus_slots=2\n"
    assert load(tmp_path, text)["gpu01"].slots == 2


def test_group_priority_wins_over_name_among_siblings(tmp_path: Path) -> None:
    text = ("[a]\ngpu01\n[b]\ngpu01\n[a:vars]\nprimus_slots=1\nansible_group_priority=10\n"
            "[b:vars]\nprimus_slots=2\n")
    assert load(tmp_path, text)["gpu01"].slots == 1


def test_group_priority_must_be_an_integer(tmp_path: Path) -> None:
    caught = error(tmp_path, "[a]\ngpu01\n[a:vars]\nansible_group_priority=high\n")
    assert "group a: ansible_group_priority='high': must be an integer" in str(caught)


def test_group_vars_all_file_wins_over_group_vars_in_the_inventory_file(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[gpu]\ngpu01\n[gpu:vars]\nprimus_slots=8\n",
                 files={"group_vars/all.yml": "primus_slots: 2\n"})
    assert hosts["gpu01"].slots == 2


def test_group_vars_files_are_layered_like_their_groups(tmp_path: Path) -> None:
    text = "[a100]\ngpu01\n[gpu:children]\na100\n"
    hosts = load(tmp_path, text, files={"group_vars/gpu.yml": "primus_slots: 2\nprimus_gpus: 2\n",
                                        "group_vars/a100.yaml": "primus_slots: 1\n"})
    assert (hosts["gpu01"].slots, hosts["gpu01"].gpus) == (1, 2)


def test_host_vars_file_wins_over_inline_host_vars(tmp_path: Path) -> None:
    hosts = load(tmp_path, "gpu01 primus_slots=1 primus_gpus=1\n",
                 files={"host_vars/gpu01.yml": "primus_slots: 2\n"})
    assert (hosts["gpu01"].slots, hosts["gpu01"].gpus) == (2, 1)


def test_vars_directory_files_merge_in_name_order_skipping_hidden_ones(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[gpu]\ngpu01\n", files={
        "group_vars/gpu/b.yml": "primus_slots: 2\n",
        "group_vars/gpu/a.yml": "primus_slots: 1\nprimus_gpus: 1\n",
        "group_vars/gpu/nested/c.yaml": "primus_gpus: 3\n",
        "group_vars/gpu/README.md": "primus_slots: 99\n",
        "group_vars/gpu/.hidden.yml": "primus_slots: 99\n",
        "group_vars/gpu/z.yml~": "primus_slots: 99\n",
        "group_vars/gpu.yml": "primus_slots: 99\n",  # the directory is found first
    })
    assert (hosts["gpu01"].slots, hosts["gpu01"].gpus) == (2, 3)


def test_vars_files_without_suffix_or_in_json_are_read(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[gpu]\ngpu01\n", files={"host_vars/gpu01": "primus_slots: 3\n",
                                                    "group_vars/gpu.json": '{"primus_gpus": 4}'})
    assert (hosts["gpu01"].slots, hosts["gpu01"].gpus) == (3, 4)


def test_vars_file_that_is_not_a_mapping_is_refused_naming_it(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01\n", files={"group_vars/gpu.yml": "- primus_slots\n"})
    assert caught.source == str(tmp_path / "group_vars" / "gpu.yml")
    assert "a vars file maps variable names to values" in str(caught)


def test_empty_vars_file_is_ignored(tmp_path: Path) -> None:
    assert load(tmp_path, "[gpu]\ngpu01\n", files={"group_vars/gpu.yml": ""})["gpu01"].slots is None


# From variables to hosts.


def test_ansible_variables_set_address_and_ssh_settings(tmp_path: Path) -> None:
    text = ("gpu01 ansible_host=10.0.0.1 ansible_port=2222 ansible_user=trainer"
            " ansible_ssh_private_key_file=~/.ssh/id_cluster"
            " ansible_ssh_extra_args='-o ServerAliveInterval=5'"
            " ansible_ssh_common_args=\"-o 'ProxyJump bastion' -4\"\n")
    host = load(tmp_path, text)["gpu01"]
    assert (host.address, host.launcher) == ("10.0.0.1", "ssh")
    assert host.ssh == SshSettings(port=2222, user="trainer", key_file="~/.ssh/id_cluster",
                                   extra_args=("-o", "ProxyJump bastion", "-4",
                                               "-o", "ServerAliveInterval=5"))


def test_host_without_variables_is_reached_by_ssh_at_its_name(tmp_path: Path) -> None:
    assert load(tmp_path, "gpu01\n")["gpu01"] == Host(
        name="gpu01", address="gpu01", launcher="ssh", groups=frozenset({"all", "ungrouped"}))


def test_later_ssh_alias_wins_as_in_ansible(tmp_path: Path) -> None:
    text = ("gpu01 ansible_host=a ansible_ssh_host=b ansible_port=1 ansible_ssh_port=2"
            " ansible_user=a ansible_ssh_user=b ansible_private_key_file=a"
            " ansible_ssh_private_key_file=b\n")
    host = load(tmp_path, text)["gpu01"]
    assert (host.address, host.ssh) == ("b", SshSettings(port=2, user="b", key_file="b"))


@pytest.mark.parametrize(("connection", "launcher"), [
    ("local", "local"), ("ansible.builtin.local", "local"),
    ("ssh", "ssh"), ("ansible.builtin.ssh", "ssh")])
def test_ansible_connection_selects_the_launcher(tmp_path: Path, connection: str,
                                                 launcher: str) -> None:
    assert load(tmp_path, f"gpu01 ansible_connection={connection}\n")["gpu01"].launcher == launcher


def test_unsupported_connection_is_refused_naming_the_host(tmp_path: Path) -> None:
    caught = error(tmp_path, "[win]\nwin01 ansible_connection=winrm\n")
    assert "host win01: ansible_connection='winrm': Primus reaches hosts by ssh or local" in str(
        caught)


def test_primus_python_wins_over_ansible_python_interpreter(tmp_path: Path) -> None:
    hosts = load(tmp_path, "a ansible_python_interpreter=/usr/bin/python3.11\n"
                           "b ansible_python_interpreter=/usr/bin/python3 primus_python=/venv/py\n"
                           "c ansible_python_interpreter=auto_silent\n")
    assert [host.python for host in hosts.values()] == ["/usr/bin/python3.11", "/venv/py",
                                                        "python3"]


@pytest.mark.parametrize(("value", "memory"), [
    ("68719476736", 68719476736), ("64Gi", 64 * 2**30), ("512G", 512 * 10**9)])
def test_primus_memory_is_bytes_or_a_size_with_a_unit(tmp_path: Path, value: str,
                                                      memory: int) -> None:
    assert load(tmp_path, f"gpu01 primus_memory={value}\n")["gpu01"].memory == memory


def test_primus_variables_set_resources_labels_and_home(tmp_path: Path) -> None:
    text = ("[gpu]\ngpu01 primus_labels=a100,nvlink\ngpu02 primus_labels=\"['ib']\"\n"
            "[gpu:vars]\nprimus_slots=8\nprimus_cpu=63.5\nprimus_gpus=0\nprimus_home=/scratch\n")
    hosts = load(tmp_path, text)
    assert (hosts["gpu01"].slots, hosts["gpu01"].cpu, hosts["gpu01"].gpus) == (8, 63.5, 0)
    assert (hosts["gpu01"].labels, hosts["gpu02"].labels) == ({"a100", "nvlink"}, {"ib"})
    assert hosts["gpu01"].home == "/scratch"


@pytest.mark.parametrize(("assignment", "allowed"), [
    ("primus_slots=many", "must be a whole number from 1 to 1000000"),
    ("primus_slots=0", "must be a whole number from 1 to 1000000"),
    ("primus_slots=2.5", "must be a whole number from 1 to 1000000"),
    ("primus_slots=True", "must be a whole number from 1 to 1000000"),
    ("primus_gpus=-1", "must be a whole number from 0 to 1024"),
    ("ansible_port=abc", "must be a whole number from 1 to 65535"),
    ("ansible_port=70000", "must be a whole number from 1 to 65535"),
    ("primus_cpu=0", "must be a number > 0"),
    ("primus_cpu=lots", "must be a number > 0"),
    ("primus_memory=64GB", "must be a whole number of bytes, or a whole number with a unit"),
    ("primus_memory=0", "must be greater than 0"),
    ("primus_labels=\"[1, 2]\"", "must be a list of strings or a comma-separated string"),
    ("ansible_user=\"['a']\"", "must be a non-empty string"),
    ("ansible_ssh_extra_args=\"'-o\"", "quoted as in a shell"),
    ("ansible_host=\"{{ inventory_hostname }}.ib\"", "Jinja2 templates are not evaluated"),
])
def test_bad_variable_value_is_refused_naming_host_variable_value_and_what_is_allowed(
        tmp_path: Path, assignment: str, allowed: str) -> None:
    key = assignment.partition("=")[0]
    caught = error(tmp_path, f"[gpu]\ngpu01 ok=1\ngpu02 {assignment}\n")
    assert caught.line == 3 and caught.subject == "host gpu02"
    assert re.search(rf"host gpu02: {key}=.+: .*{re.escape(allowed)}", str(caught))


def test_bad_group_variable_is_refused_at_the_line_that_sets_it(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01\n\n[gpu:vars]\nprimus_slots=many\n")
    assert str(caught) == (f"{tmp_path / 'hosts'}:5: host gpu01: primus_slots='many':"
                           " must be a whole number from 1 to 1000000")


def test_bad_value_in_a_vars_file_names_that_file(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01\n", files={"host_vars/gpu01.yml": "primus_gpus: many\n"})
    assert caught.source == str(tmp_path / "host_vars" / "gpu01.yml") and caught.line is None
    assert "host gpu01: primus_gpus='many'" in str(caught)


def test_unknown_primus_variable_is_refused_as_a_typo(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01 primus_slot=4\n")
    assert caught.line == 2
    assert "host gpu01: unknown variable primus_slot; Primus reads primus_cpu," in str(caught)


def test_the_deployment_playbooks_variables_are_left_to_it(tmp_path: Path) -> None:
    hosts = load(tmp_path, "[primus]\nh1 primus_deploy_state_dir=/srv/p primus_slots=2\n"
                           "[all:vars]\nprimus_deploy_service_manager=daemon\n")
    assert hosts["h1"].slots == 2


def test_other_unknown_variables_are_left_to_ansible(tmp_path: Path) -> None:
    hosts = load(tmp_path, "gpu01 ansible_become=true http_port=80 slots=x\n")
    assert hosts["gpu01"].slots is None


def test_bad_variables_of_hosts_outside_the_selected_group_do_not_matter(tmp_path: Path) -> None:
    text = "[primus]\ngpu01\n[windows]\nwin01 ansible_connection=winrm primus_slots=x\n"
    assert list(load(tmp_path, text, group=None)) == ["gpu01"]


# Selecting hosts.


def test_default_group_is_primus_when_the_inventory_has_it(tmp_path: Path) -> None:
    text = "login\n[gpu]\ngpu01\ngpu02\n[primus:children]\ngpu\n"
    assert list(load(tmp_path, text, group=None)) == ["gpu01", "gpu02"]


def test_default_group_is_all_without_a_primus_group(tmp_path: Path) -> None:
    assert list(load(tmp_path, "login\n[gpu]\ngpu01\n", group=None)) == ["login", "gpu01"]


def test_hosts_are_in_file_order_without_duplicates(tmp_path: Path) -> None:
    text = "[b]\ngpu02\ngpu01\n[a]\ngpu03\ngpu01\n[all:children]\nb\na\n"
    assert list(load(tmp_path, text)) == ["gpu02", "gpu01", "gpu03"]


def test_group_that_does_not_exist_is_refused_listing_the_groups(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01\n[cpu]\ncpu01\n", group="tpu")
    assert str(caught) == (f"{tmp_path / 'hosts'}: no group 'tpu'; the groups are all, cpu,"
                           " gpu, ungrouped")


def test_group_without_hosts_is_refused(tmp_path: Path) -> None:
    caught = error(tmp_path, "[gpu]\ngpu01\n[primus:children]\ncpu\n[cpu]\n", group=None)
    assert str(caught).endswith("group primus: has no hosts; Primus needs at least one")


def test_empty_inventory_is_refused(tmp_path: Path) -> None:
    assert "group all: has no hosts" in str(error(tmp_path, "# nothing yet\n"))


def test_inventory_host_finds_a_selected_host_by_name(tmp_path: Path) -> None:
    inventory = load_inventory(write(tmp_path, "[gpu]\ngpu01\ngpu02\n"))
    assert inventory.host("gpu02").name == "gpu02"
    assert inventory.source == str(tmp_path / "hosts")
    with pytest.raises(InventoryError, match="no host named 'gpu03' among the 2 selected hosts"):
        inventory.host("gpu03")


# Hostfiles.


def test_hostfile_hosts_use_ssh_their_name_and_their_slots(tmp_path: Path) -> None:
    text = "# DeepSpeed\nworker-1 slots=4\n\nworker-2 slots=8  # the big one\nworker-3:2\n"
    hosts = load(tmp_path, text, "hostfile", group=None)
    assert list(hosts.values()) == [
        Host(name=name, address=name, launcher="ssh", slots=slots,
             groups=frozenset({"all", "ungrouped"}))
        for name, slots in (("worker-1", 4), ("worker-2", 8), ("worker-3", 2))]


def test_hostfile_ignores_group_vars_beside_it(tmp_path: Path) -> None:
    hosts = load(tmp_path, "worker-1 slots=4\n", "hostfile",
                 files={"group_vars/all.yml": "primus_slots: 1\n"})
    assert hosts["worker-1"].slots == 4


@pytest.mark.parametrize("line", ["worker-2", "worker-2 slots=x", "worker-2 slots=0",
                                  "worker-2 slots=4 gpus=2", "worker-2:four"])
def test_malformed_hostfile_line_is_refused_with_its_number(tmp_path: Path, line: str) -> None:
    caught = error(tmp_path, f"worker-1 slots=4\n{line}\n", "hostfile")
    assert caught.line == 2
    assert "a hostfile line is NAME slots=N or NAME:N" in str(caught)


def test_host_listed_twice_in_a_hostfile_is_refused(tmp_path: Path) -> None:
    caught = error(tmp_path, "worker-1 slots=4\n# x\nworker-1 slots=8\n", "hostfile")
    assert str(caught) == (f"{tmp_path / 'hostfile'}:3: host worker-1: is listed again (first on"
                           " line 1); list each host once")


# Files.


def test_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="missing.ini: cannot read: No such file"):
        load_inventory(tmp_path / "missing.ini")


def test_inventory_error_is_a_primus_error() -> None:
    assert issubclass(InventoryError, PrimusError)
