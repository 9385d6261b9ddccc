"""Hypothesis strategies for hostile configuration input.

Each strategy makes *structured* input that looks like what a person would write (a job with
roles, an inventory with groups and host ranges) in which some fields are replaced by values that
break rules: wrong types, numbers past every bound, NaN and infinities, NUL and markup-like text,
very long strings, unknown and duplicate keys, anchors and aliases, deep nesting, explicit YAML
tags. Random text and bytes are offered too.

Documents are trees of Python values in which two marker types may appear: :class:`Raw` (YAML text
put in verbatim) and :class:`Pairs` (a mapping written pair by pair, so a key can appear twice).
:func:`flow_yaml` writes such a tree as flow-style YAML; trees without markers may also be written
by ``yaml.safe_dump`` or ``json.dumps``.

Paths that tests must create (a FIFO, a directory, a file of bytes) are written as
``@DIR@/<name>`` with a name from :data:`SPECIAL_FILES`; the test replaces ``@DIR@`` with the
directory it made for the example.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import yaml
from hypothesis import strategies as st

from primus.config.spec import ENV_NAME_PATTERN, JOB_NAME_PATTERN, ROLE_NAME_PATTERN

DIR = "@DIR@"
SPECIAL_FILES = ("fifo", "directory", "binary", "empty", "missing")
"""Names under ``@DIR@`` a test creates for every example (``missing`` stays absent)."""
special_paths = st.sampled_from(SPECIAL_FILES).map(lambda name: f"{DIR}/{name}")


@dataclass(frozen=True)
class Raw:
    """YAML text put into a document as it is: a tag, an anchor, an alias, a malformed scalar."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """A mapping written pair by pair, in order, so that a key may be given twice."""

    items: tuple[tuple[Any, Any], ...]


def flow_yaml(value: Any) -> str:
    """``value`` as one line of flow-style YAML; :class:`Raw` verbatim, strings double-quoted."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Pairs | dict):
        items = value.items if isinstance(value, Pairs) else value.items()
        return "{" + ", ".join(f"{flow_yaml(k)}: {flow_yaml(v)}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(flow_yaml, value)) + "]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML quoted scalar
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):  # YAML's own form: 1.0e-05, .inf, .nan
        return yaml.safe_dump(value).partition("\n")[0]
    if isinstance(value, datetime):
        return value.isoformat(" ")  # unquoted: YAML reads it as a timestamp
    return repr(value)


def plain(value: Any) -> Any:
    """A tree for ``yaml.safe_dump`` and ``json.dumps``: no markers, datetimes as text."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


DOCUMENT_WRAPPERS = (
    "%YAML 1.1\n---\n{}\n",
    "---\n{}\n...\n",
    "{}\n---\n{{}}\n",  # two documents
    "\ufeff{}",  # a byte order mark
    "{}\n\0",
    "# comment\n{}\n#",
    "\t{}",
)


def documents(trees: st.SearchStrategy[Any], markers: st.SearchStrategy[Any]
              ) -> st.SearchStrategy[str]:
    """Text of YAML/JSON documents: ``trees`` (plain values) in block YAML, flow YAML or JSON, and
    ``markers`` (trees that may hold :class:`Raw` and :class:`Pairs`) in flow YAML."""
    return st.one_of(
        trees.map(lambda tree: yaml.safe_dump(plain(tree), allow_unicode=True, sort_keys=False)),
        trees.map(lambda tree: json.dumps(plain(tree), ensure_ascii=False)),
        trees.map(flow_yaml),
        markers.map(flow_yaml),
        st.tuples(st.sampled_from(DOCUMENT_WRAPPERS), markers.map(flow_yaml)).map(
            lambda pair: pair[0].format(pair[1])),
    )


def one_in(n: int, rare: st.SearchStrategy[Any], common: st.SearchStrategy[Any]
           ) -> st.SearchStrategy[Any]:
    """``rare`` about once in ``n`` draws, else ``common``, to which it shrinks. (``one_of`` draws
    its branches about evenly however often a strategy is repeated in it, and ``integers`` draws
    its bounds far more often than other values.)"""
    return st.sampled_from(range(n)).flatmap(lambda i: rare if i == n - 1 else common)


# Hostile values.

MARKUP = ("[/x]", "[/]", "[bold red]w[/bold red]", "[link=file:///etc/passwd]x[/link]", ":smile:",
          "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "%s%n%x", "{0}", "{{ jinja }}", "{% raw %}")
ODD_TEXT = ("", " ", "\t", "a\0b", "\0", "line\nbreak", "cr\rhere", "\u2028", "\u0085", "\x0b",
            "\ufeff", "\u202e", "é", "名前", "😀", "-", "~", "*", "&", "!", "?", "|", ">", "%",
            "@", "`", "'", '"', "\\", "null", "NaN", "yes", "no", "on", "0x1F", "0o17", "1_000",
            "1:30", "../../etc/passwd", "/dev/zero", "*.txt", "a b", "--help", "-rf")
LONG_TEXT = st.integers(min_value=60_000, max_value=70_000).map(lambda n: "x" * n)
"""Around :data:`primus.config.spec.MAX_STRING` (65,536)."""

hostile_text = st.one_of(st.sampled_from(MARKUP), st.sampled_from(ODD_TEXT), st.text(max_size=40),
                         st.builds("".join, st.lists(st.sampled_from(MARKUP + ODD_TEXT),
                                                     max_size=4)))

hostile_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from((0, -1, 2**31, 2**63, 2**64, 10**18, 10**30, 315_360_001, 100_001, 1025)),
    st.floats(),
    st.sampled_from((math.inf, -math.inf, math.nan, -0.0, 5e-324, 1e308, 1e20, 0.1)),
)

hostile_scalars = st.one_of(st.none(), st.booleans(), hostile_numbers, hostile_text,
                            st.datetimes(), st.binary(max_size=8).map(lambda b: b.hex()))


def _anchored_levels(width: int, levels: int) -> str:
    """A "billion laughs" sequence: each level an anchored list of ``width`` aliases of the one
    before; ``width ** levels`` values once expanded."""
    items = ["&l0 [lol, lol]"] + [
        f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "[" + ", ".join(items) + "]"


RAW_SCALARS = (
    ".inf", "-.inf", ".nan", ".NaN", "1e400", "-1e400", "1e-400", "0x7fffffffffffffffff",
    "0o777777777777777777777", "0b" + "1" * 90, "190:20:30", "1_000_000", "+.5", "-0",
    "2026-13-45", "2026-02-30", "2026-01-01T25:00:00", "2001-12-14t21:59:43.10+99:00",
    "9999-12-31T23:59:59-23:00", "0001-01-01T00:00:00+23:00", "2026-01-01 10:00:00 Z",
    "!!int abc", "!!int ''", "!!int 0x", "!!float x", "!!float ''", "!!bool maybe", "!!null x",
    "!!timestamp x", "!!timestamp 2026-13-01", "!!binary '@@@'", "!!binary AAAA", "!!str 1",
    "!!set {a, b}", "!!omap [a]", "!!omap [{a: 1}, {a: 2}]", "!!pairs [1]", "!!map [1]",
    "!!seq {a: 1}", "!unknown x", "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system", "*nowhere", "&a 1", "&a [1, *a]", "&a {name: w, command: c}",
    "*a", "&b [1, 2]", "*b", "? [a]", "{[a]: 1}",
    "{{a: 1}: 2}", "[", "]", "{", "}", "'unclosed", '"unclosed', '"\\ud800"', '"\\x00"',
    '"\\uffff"', '"\\U0010ffff"', '"\\q"', "|", ">", "- a", "a: b", "@x", "`x", "%x", "!",
    "&", "~", "<<", "=", "\t1",
)

raw_scalars = st.one_of(
    st.sampled_from(RAW_SCALARS).map(Raw),
    st.integers(min_value=90, max_value=6_000).map(lambda n: Raw("9" * n)),  # long numbers
    st.integers(min_value=90, max_value=400).map(lambda n: Raw("1." + "5" * n)),
    st.integers(min_value=1, max_value=300).map(lambda n: Raw("[" * n + "]" * n)),  # nesting
    st.integers(min_value=1, max_value=100).map(lambda n: Raw("{a: " * n + "1" + "}" * n)),
    st.tuples(st.integers(2, 10), st.integers(1, 12)).map(lambda p: Raw(_anchored_levels(*p))),
)


def hostile_values(markers: bool) -> st.SearchStrategy[Any]:
    """Any hostile value: scalars, small collections of them, and (with ``markers``) raw YAML,
    duplicate keys and merge keys."""
    scalars = st.one_of(hostile_scalars, raw_scalars) if markers else hostile_scalars
    keys = st.one_of(st.sampled_from(("a", "name", "roles", "env")), hostile_text,
                     hostile_numbers, st.none(), st.booleans())
    collections = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(keys, inner, max_size=4),
            *([_pairs(keys, inner)] if markers else [])),
        max_leaves=8)
    return collections


def _pairs(keys: st.SearchStrategy[Any], values: st.SearchStrategy[Any]
           ) -> st.SearchStrategy[Pairs]:
    """Mappings that may give a key twice, or merge another mapping in with ``<<``."""
    key = st.one_of(keys, st.just(Raw("<<")))
    return st.builds(lambda items, again: Pairs(tuple(items + items[:again])),
                     st.lists(st.tuples(key, values), min_size=1, max_size=4),
                     st.booleans())  # the first key again, or not


def sometimes(valid: st.SearchStrategy[Any], hostile: bool, markers: bool
              ) -> st.SearchStrategy[Any]:
    """``valid`` most of the time; with ``hostile``, also any hostile value."""
    return one_in(4, hostile_values(markers), valid) if hostile else valid


def sometimes_key(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mapping keys: ``valid`` most of the time, else any hostile scalar (keys are hashable)."""
    return one_in(4, hostile_scalars, valid)


def with_extra_keys(mappings: st.SearchStrategy[dict[str, Any]], hostile: bool, markers: bool
                    ) -> st.SearchStrategy[Any]:
    """``mappings`` with, when hostile, unknown keys added and (with markers) a key given twice."""
    if not hostile:
        return mappings

    @st.composite
    def extend(draw: st.DrawFn) -> Any:
        mapping = dict(draw(mappings))
        for key in draw(st.lists(st.one_of(hostile_text, hostile_numbers), max_size=2)):
            if isinstance(key, float) and math.isnan(key):
                continue  # NaN keys never compare equal: not a useful duplicate
            mapping[key] = draw(hostile_values(markers))
        if markers and mapping and draw(st.booleans()):
            items = list(mapping.items())
            again = draw(st.sampled_from(items))[0]
            return Pairs(tuple(items) + ((again, draw(hostile_values(markers))),))
        return mapping

    return extend()


# Job files.

role_names = st.one_of(st.from_regex(ROLE_NAME_PATTERN, fullmatch=True),
                       st.sampled_from(("worker", "ps", "chief")))
env_names = st.from_regex(ENV_NAME_PATTERN, fullmatch=True).filter(lambda name: len(name) < 40)
durations = st.one_of(st.integers(min_value=0, max_value=400_000_000),
                      st.from_regex(r"[0-9]{1,12}(s|m|h)?", fullmatch=True),
                      st.sampled_from(("10s", "2m", "1h", "315360000", "315360001", "5256000m",
                                       "87600h", "87601h")))
byte_counts = st.one_of(st.integers(min_value=1, max_value=2**61),
                        st.from_regex(r"[0-9]{1,22}(k|M|G|T|Ki|Mi|Gi|Ti)?", fullmatch=True),
                        st.sampled_from(("512Mi", "1Gi", "1048576Ti", "1048577Ti", "1Pi", "0")))
texts = one_in(50, LONG_TEXT, st.text(st.characters(codec="utf-8", exclude_characters="\0"),
                                     min_size=1, max_size=30))
"""Text of job fields; now and then one near the bound of a job's strings (slow to read)."""
commands = st.one_of(texts, st.lists(texts, min_size=1, max_size=4),
                     st.sampled_from(("python train.py", "sleep 1", ["python", "-c", "pass"])))
env_values = st.one_of(texts, st.integers(), st.floats(allow_nan=False, allow_infinity=False))
offsets = st.timedeltas(min_value=timedelta(hours=-23, minutes=-59),
                        max_value=timedelta(hours=23, minutes=59)).map(
    lambda delta: timezone(timedelta(minutes=delta // timedelta(minutes=1))))
datetimes = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                         timezones=st.one_of(st.none(), offsets))


@functools.cache
def job_trees(hostile: bool = True, markers: bool = False) -> st.SearchStrategy[Any]:
    """Job specs as trees: valid-looking, with (``hostile``) fields replaced by hostile values,
    and (``markers``) raw YAML and duplicate keys in them. Built once per kind (strategies do
    not change): every test module's ``@given`` asks for them when it is imported, in each of
    the suite's workers."""

    def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return sometimes(valid, hostile, markers)

    def mapping(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
        return with_extra_keys(st.fixed_dictionaries(
            {key: field(value) for key, value in required.items()},
            optional={key: field(value) for key, value in optional.items()}), hostile, markers)

    exit_codes = st.lists(st.integers(min_value=-1, max_value=300), max_size=3)
    role = mapping(
        {"name": role_names, "command": commands},
        {"num": st.integers(min_value=0, max_value=100_001), "env": st.dictionaries(
            env_names, env_values, max_size=3),
         "cpu": st.floats(min_value=0, max_value=200_000), "memory": byte_counts,
         "gpu": st.integers(min_value=-1, max_value=2000), "ports": st.integers(-1, 70),
         "success_percent": st.floats(min_value=0, max_value=101),
         "max_per_host": st.integers(min_value=0, max_value=100_001),
         "hosts": st.lists(texts, max_size=3),
         "restart_policy": st.sampled_from(("never", "on_failure", "always", "exit_code", "x")),
         "retryable_exit_codes": exit_codes, "permanent_exit_codes": exit_codes,
         "max_failures": st.integers(min_value=0, max_value=2**31),
         "max_role_failures": st.integers(min_value=0, max_value=2**31),
         "restart_backoff": durations, "restart_backoff_max": durations,
         "failure_action": st.sampled_from(("fail_app", "fail_executor", "x"))})
    source = mapping(
        {"path": st.one_of(texts, st.sampled_from(("/data/*.txt", "d/{{YYYY}}/{{MM}}/*",
                                                   "s3://b/{{DD}}{{HH}}", "zip://x::a.zip")))},
        {"start": datetimes, "end": datetimes, "success_marker": texts,
         "marker_timeout": durations,
         "table": mapping({"format": st.sampled_from(("delta", "iceberg", "hudi"))},
                          {"path": texts, "catalog": texts, "name": texts,
                           "version": st.integers(-1, 2**64),
                           "snapshot": st.integers(-(2**64), 2**64)})})
    stream = mapping(
        {"name": role_names, "roles": st.lists(role_names, min_size=1, max_size=3),
         "sources": st.lists(source, min_size=1, max_size=2)},
        {"format": st.sampled_from(("text", "bytes", "tfrecord", "parquet", "avro")),
         "columns": st.one_of(st.none(), st.lists(texts, max_size=3)),
         "filter": st.lists(st.tuples(texts, st.sampled_from(("=", "in", "~")),
                                      st.one_of(texts, st.integers(), st.lists(texts))),
                            max_size=3),
         "chunk_size": byte_counts, "epochs": st.integers(0, 2**31), "shuffle": st.booleans(),
         "seed": st.integers(min_value=-(2**64), max_value=2**64),
         "max_task_attempts": st.integers(0, 10), "task_success_percent": st.floats(0, 101),
         "task_failed_percent": st.floats(0, 101),
         "delivery": st.sampled_from(("stdin", "fifo", "shm", "mmap")),
         "preprocess": st.one_of(texts, st.sampled_from(("mod:fn", "a.b:c", ":fn", "mod:"))),
         "checkpoint_records": st.integers(0, 2**31), "checkpoint_interval": durations,
         "prefetch": st.integers(-1, 20)})
    policy = mapping({}, {
        "heartbeat_ttl": durations, "register_timeout": durations, "stop_grace": durations,
        "max_app_attempts": st.integers(0, 101), "deadline": durations,
        "blacklist_failures": st.integers(-1, 10), "blacklist_cooldown": durations})
    return mapping(
        {"name": st.from_regex(JOB_NAME_PATTERN, fullmatch=True),
         "roles": st.lists(role, min_size=1, max_size=3)},
        {"env": st.dictionaries(env_names, env_values, max_size=3),
         "secret_env": st.lists(env_names, max_size=2),
         "policy": policy, "workdir": st.one_of(texts, special_paths),
         "files": st.lists(st.one_of(texts, special_paths), max_size=3),
         "placement": st.sampled_from(("spread", "pack", "x")),
         "am": mapping({}, {"host": texts, "replicas": st.integers(0, 6)}),
         "data": st.lists(stream, max_size=2),
         "from_savepoint": st.one_of(texts, st.sampled_from((
             "train-20261127-180000-ab12/1", "train/1", "train-20261127-180000-ab12/x"))),
         "savepoints_kept": st.integers(-1, 1001)})


def valid_job_texts() -> st.SearchStrategy[str]:
    """Job files that look valid, with values at and past their bounds, in every serialization."""
    return documents(job_trees(hostile=False), job_trees(hostile=False))


def job_texts() -> st.SearchStrategy[str]:
    """Job files: hostile structured jobs in every serialization, valid-looking ones, random
    text."""
    return st.one_of(
        documents(job_trees(hostile=True), job_trees(hostile=True, markers=True)),
        valid_job_texts(),
        st.text(max_size=200),
        hostile_values(markers=True).map(flow_yaml),
    )


# --set expressions.

_set_keys = st.one_of(
    st.sampled_from((
        "name", "roles", "roles.0", "roles.0.num", "roles.worker.num", "roles.0.env.X",
        "roles.nosuch.num", "roles.9.num", "roles.-1.num", "roles.².num", "roles." + "9" * 5000,
        "roles.0.command", "roles.0.env", "env", "env.A", "env.A.B", "policy.heartbeat_ttl",
        "policy", "policy.deadline", "am.host", "am", "data", "data.0.sources.0.path",
        "data.0.name", "name.x", "x", "x.y.z", "roles..num", ".", "..", "", "a=b", "[/x]",
        "roles.0.cpu", "roles.0.memory", "workdir", "files.0", "secret_env")),
    st.lists(st.one_of(st.sampled_from(("roles", "env", "0", "1", "worker", "name", "num")),
                       st.text(max_size=8)), min_size=1, max_size=5).map(".".join),
)
_set_values = st.one_of(
    hostile_values(markers=True).map(flow_yaml),
    st.sampled_from(("[unclosed", "{a:", "&a *a", "*b", "4", "2m", "worker", "", "=", "a=b",
                     "'x", "\t1", ".inf", "- a\n- b", "a: 1\na: 2", "!!int x", "2026-13-45"))
)
set_expressions = st.one_of(
    st.tuples(_set_keys, _set_values).map("=".join),
    st.text(max_size=30),
    st.sampled_from(("novalue", "=", "=1", "a.=1", ".a=1", "roles.0.num")),
)


# Site defaults files.

def site_trees(hostile: bool = True, markers: bool = False) -> st.SearchStrategy[Any]:
    """Site defaults files as trees (``$PRIMUS_CONF``)."""

    def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return sometimes(valid, hostile, markers)

    paths = st.one_of(texts, special_paths, st.sampled_from(("/dev/zero", "/dev/null", "/")))
    etcd = with_extra_keys(st.fixed_dictionaries({}, optional={
        "endpoints": field(st.one_of(texts, st.lists(texts, max_size=3))),
        "ca_cert": field(paths), "cert": field(paths), "key": field(paths),
        "user": field(texts), "password_file": field(paths),
        "request_timeout": field(st.floats(min_value=0))}), hostile, markers)
    ssh = with_extra_keys(st.fixed_dictionaries({}, optional={
        "known_hosts": field(paths),
        "strict_host_key_checking": field(st.sampled_from(("yes", "no", "accept-new", "ask"))),
        **{key: field(st.integers(min_value=-1, max_value=2**31))
           for key in ("connect_timeout", "max_parallel", "retries")}}), hostile, markers)
    return with_extra_keys(st.fixed_dictionaries({}, optional={
        "etcd": field(etcd), "prefix": field(st.one_of(texts, st.just("/primus"))),
        "home": field(paths), "inventory": field(paths), "ssh": field(ssh),
        "job": field(job_trees(hostile, markers))}), hostile, markers)


def site_texts() -> st.SearchStrategy[str]:
    """Site defaults files in every serialization, and random text."""
    return st.one_of(documents(site_trees(), site_trees(markers=True)),
                     documents(site_trees(hostile=False), site_trees(hostile=False)),
                     st.text(max_size=100))


# Inventories.

group_names = st.one_of(st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
                        st.sampled_from(("all", "ungrouped", "primus", "gpu")))


def host_patterns(range_digits: int) -> st.SearchStrategy[str]:
    """Host patterns: names, ranges with bounds of up to ``range_digits`` digits (a range
    expands to as many hosts as its bounds say), ports, IPv6 addresses, malformed ones."""
    bound = st.from_regex(f"[0-9]{{0,{range_digits}}}", fullmatch=True)
    return st.one_of(
        st.from_regex(r"[a-z][a-z0-9.-]{0,15}", fullmatch=True),
        st.builds(lambda head, begin, end, step, tail: f"{head}[{begin}:{end}{step}]{tail}",
                  st.from_regex(r"[a-z]{1,5}", fullmatch=True),
                  st.one_of(bound, st.sampled_from("aAz")),
                  st.one_of(bound, st.sampled_from("aZz")),
                  st.sampled_from(("", ":1", ":2", ":0", ":x", ":")),
                  st.sampled_from(("", ".example", "[1:3]", "[a:c]", "[", "]"))),
        st.builds("{}:{}".format, st.from_regex(r"[a-z]{1,5}", fullmatch=True),
                  st.one_of(st.integers(min_value=0, max_value=70_000),
                            st.integers(90, 6000).map(lambda n: "9" * n))),
        st.sampled_from(("[::1]:22", "[::1]", "::1", "h[01:99]", "h[1:100001]", "h[0:99999999999]",
                         "h[1:2:0]", "h[9:1]", "h[01:9]", "h[²:³]", "h[:]", "h[a:]", "---", ":",
                         "h:", "[h]:", "h[", "h]", "a[1:3]b[1:3]c[1:3]d[1:3]e[1:3]", "x" * 300)),
        hostile_text.filter(lambda text: "\n" not in text and "\r" not in text),
    )


variable_names = st.one_of(
    st.sampled_from((
        "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user",
        "ansible_connection", "ansible_private_key_file", "ansible_ssh_common_args",
        "ansible_ssh_extra_args", "ansible_python_interpreter", "ansible_group_priority",
        "primus_cpu", "primus_gpus", "primus_home", "primus_labels", "primus_memory",
        "primus_python", "primus_slots", "primus_unknown")),
    st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True))
ini_values = st.one_of(
    st.sampled_from((
        "1", "0", "-1", "22", "65536", "1e999", "-1e999", "nan", "inf", "1.5", "True", "None",
        "ssh", "local", "winrm", "'a b'", '"a"', "'unclosed", "[1, 2]", "['a', 'b']", "{1, 2}",
        "{'a': 1}", "b'x'", "1j", "(1,)", "a,b", "{{ x }}", "{% x %}", "-o Opt=1 'a", "512Mi",
        "1Ei", "auto", "[/x]", "\\d", "()", "(" * 300 + ")" * 300, "[" * 300 + "]" * 300,
        "9" * 5000, "1" + "0" * 400 + ".0", "0x" + "f" * 200, "--", "#x", ";x", "a=b", "=")),
    st.text(max_size=20).filter(lambda text: "\n" not in text and "\r" not in text),
    st.integers().map(str), st.floats().map(repr))
ini_sections = st.one_of(
    st.builds("[{}{}]".format, group_names,
              st.sampled_from(("", "", ":vars", ":children", ":members", ":"))),
    st.builds("[{}]".format, hostile_text.filter(lambda text: "\n" not in text)),
)


def ini_inventories(range_digits: int = 4) -> st.SearchStrategy[str]:
    """Ansible INI inventories: sections of every type, hosts with ranges and ports, variables
    as Python literals, comments, and malformed lines."""
    lines = st.one_of(
        st.builds(lambda pattern, variables: " ".join([pattern, *variables]),
                  host_patterns(range_digits),
                  st.lists(st.builds("{}={}".format, variable_names, ini_values), max_size=3)),
        st.builds("{} = {}".format, variable_names, ini_values),
        group_names,
        st.sampled_from(("# comment", "; comment", "", "  ", "[", "]", "[]", "[a b]", "[a:b:c]",
                         "[g:unknown]", "[:vars]", "a=b=c", "x ' y", "h slots=2", "h:4")),
        st.text(max_size=30),
    )
    return st.lists(st.tuples(ini_sections, st.lists(lines, max_size=5)), max_size=5).map(
        lambda sections: "".join(f"{head}\n" + "".join(f"{line}\n" for line in lines)
                                 for head, lines in sections))


def hostfiles(range_digits: int = 4) -> st.SearchStrategy[str]:
    """DeepSpeed/Horovod hostfiles (``NAME slots=N``, ``NAME:N``), with malformed lines."""
    patterns = host_patterns(range_digits)
    return st.lists(st.one_of(
        st.builds("{} slots={}".format, patterns, st.one_of(
            st.integers(min_value=-1, max_value=2_000_000), st.sampled_from(("", "x", "9" * 400)))),
        st.builds("{}:{}".format, patterns, st.integers(min_value=-1, max_value=2_000_000)),
        st.sampled_from(("# comment", "", "h", "h slots=", "h slots=1 max_slots=2", "h:0",
                         "h:1000000", "h:1000001", "h slots=1 # c", "h:1\nh:2"))),
        max_size=6).map(lambda lines: "".join(f"{line}\n" for line in lines))


def yaml_inventory_trees(markers: bool, range_digits: int) -> st.SearchStrategy[Any]:
    """Ansible YAML inventories as trees: groups with hosts, children and vars."""

    def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return sometimes(valid, True, markers)

    variables = st.dictionaries(variable_names, field(st.one_of(
        texts, st.integers(min_value=-1, max_value=70_000), st.floats(), st.lists(texts))),
        max_size=3)
    hosts = st.dictionaries(sometimes_key(host_patterns(range_digits)),
                            field(st.one_of(st.none(), variables)), max_size=3)
    groups = st.recursive(
        st.fixed_dictionaries({}, optional={"hosts": field(hosts), "vars": field(variables)}),
        lambda inner: st.fixed_dictionaries({}, optional={
            "hosts": field(hosts), "vars": field(variables),
            "children": field(st.dictionaries(group_names, st.one_of(st.none(), inner),
                                              max_size=2))}),
        max_leaves=4)
    return with_extra_keys(st.dictionaries(sometimes_key(group_names),
                                           field(st.one_of(st.none(), groups)),
                                           min_size=1, max_size=3), True, markers)


def yaml_inventories(range_digits: int = 4) -> st.SearchStrategy[str]:
    """Ansible YAML inventories in every serialization."""
    return documents(yaml_inventory_trees(False, range_digits),
                     yaml_inventory_trees(True, range_digits))


inventory_names = st.sampled_from(("hosts", "inventory.ini", "inventory.yml", "inventory.yaml",
                                   "inventory.json", "hostfile", "inventory.txt"))
vars_files = st.dictionaries(
    st.builds("{}/{}{}".format, st.sampled_from(("group_vars", "host_vars")),
              st.one_of(group_names, st.from_regex(r"h[0-9]{0,2}", fullmatch=True)),
              st.sampled_from(("", ".yml", ".yaml", ".json", ".txt"))),
    st.one_of(documents(st.dictionaries(variable_names, hostile_scalars, max_size=3),
                        hostile_values(markers=True)), st.text(max_size=40)),
    max_size=2)
"""``group_vars/`` and ``host_vars/`` files beside an inventory: relative path → text."""


def inventory_texts(range_digits: int = 4) -> st.SearchStrategy[str]:
    """Inventory files of every kind Primus reads, and random text; host ranges have bounds of
    at most ``range_digits`` digits."""
    return st.one_of(ini_inventories(range_digits), yaml_inventories(range_digits),
                     hostfiles(range_digits), st.text(max_size=200),
                     hostile_values(markers=True).map(flow_yaml))
