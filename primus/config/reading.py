"""Reading configuration input within stated bounds.

Job files, site defaults, inventories, hostfiles and ``--set`` values come from people and, through
the server, from the network. Everything read here is bounded before it is parsed or built:

- only regular files are read (a FIFO or a device is refused without blocking), and at most a
  stated number of bytes;
- YAML nests at most :data:`MAX_DEPTH` levels, counted after aliases are expanded, and expands to
  at most :data:`MAX_NODES` nodes (a "billion laughs" file is refused in microseconds, without
  building anything);
- a number is at most :data:`MAX_NUMBER_CHARS` characters long;
- a mapping that names a key twice is refused, naming both lines.

Problems are raised as :class:`InputError` with the line where there is one; each caller names its
source in its own error type.
"""

from __future__ import annotations

import codecs
import os
import re
import reprlib
import stat
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from primus.errors import PrimusError

MAX_CONFIG_BYTES = 1 << 20
"""Job files and site defaults: at most 1 MiB (a job is stored in one etcd value)."""

MAX_INVENTORY_BYTES = 8 << 20
"""Inventories, hostfiles and their vars files: at most 8 MiB each."""

MAX_SET_BYTES = 64 << 10
"""One ``--set KEY=VALUE``: at most 64 KiB."""

MAX_DEPTH = 64
"""Levels of nesting of YAML/JSON collections, aliases expanded."""

MAX_NODES = 200_000
"""Scalars and collections of one YAML/JSON document, aliases expanded."""

MAX_NUMBER_CHARS = 100
"""Characters of one YAML number (Python refuses to convert integers of more than 4,300 digits;
nothing Primus takes needs more than 20)."""


_SHOWN = reprlib.Repr()  # Python 3.11's Repr takes no keyword arguments
_SHOWN.maxlevel = 3
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxset = 4
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 80


def shown(value: Any) -> str:
    """``repr(value)`` cut to about 80 characters, in bounded work however large the value."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class InputError(PrimusError):
    """Input refused before it was parsed or built; the message says where (line) and why.

    Attributes:
        line: The 1-based line the problem is on, where there is one.
    """

    def __init__(self, problem: str, line: int | None = None) -> None:
        super().__init__(problem)
        self.line = line


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """Read a regular file of at most ``limit`` bytes.

    Raises:
        OSError: The file cannot be opened or read (the caller says which file).
        InputError: It is not a regular file, or it is larger than ``limit``.
    """
    # O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it is refused below.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
            raise InputError(f"is {kind}; give a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"is larger than {_size(limit)}; at most {_size(limit)} is read")
    return data


def parse_yaml(text: str | bytes) -> Any:
    """Parse one YAML (or JSON) document within the bounds of this module.

    Raises:
        InputError: Past a bound, a duplicate key, or not valid YAML (with the line).
    """
    loader = None
    try:
        loader = _BoundedLoader(text)  # reads (and may refuse) the first characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except ReaderError as exc:
        raise _unreadable(exc, text) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise InputError(f"invalid YAML{where}: {problem}",
                         None if mark is None else mark.line + 1) from None
    finally:
        if loader is not None:
            loader.dispose()


def printable(text: str) -> str:
    """``text`` with control and line-break characters escaped as in a Python string literal
    (``\\n``, ``\\x1b``, ``\\u2028``): a message that quotes input stays one line, and
    cannot move the cursor or restyle the terminal."""
    return _UNPRINTABLE.sub(lambda match: repr(match[0])[1:-1], text)


# C0 and C1 controls, DEL, and the separators str.splitlines() breaks lines at.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _unreadable(exc: ReaderError, text: str | bytes) -> InputError:
    """Bytes that are not text, or a character no YAML may hold, as an error naming the line."""
    if exc.encoding != "unicode":  # PyYAML decodes UTF-8, or UTF-16 after a byte order mark
        line = text[:exc.position].count(b"\n") + 1 if isinstance(text, bytes) else None
        return InputError(f"is not {exc.encoding.upper()} text: the byte #x{exc.character:02x} at "
                          f"line {line} cannot be decoded ({exc.reason})", line)
    if isinstance(text, bytes):  # decoded as PyYAML did: the position counts characters
        text = text.decode(next((codec for bom, codec in _BOMS if text.startswith(bom)), "utf-8"),
                           "replace")
    line = text.count("\n", 0, exc.position) + 1
    return InputError(f"invalid YAML at line {line}: the character #x{exc.character:04x} is not "
                      "allowed in YAML text; write it as an escape in a double-quoted string", line)


_BOMS = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB"


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with a depth bound while composing, duplicate keys refused and
    numbers bounded in length."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # The composer recurses once per level: bound it before Python's stack does.
        if self._depth >= MAX_DEPTH and not self.check_event(yaml.AliasEvent, yaml.ScalarEvent):
            line = self.peek_event().start_mark.line + 1
            raise InputError(f"nests deeper than {MAX_DEPTH} levels (at line {line})", line)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's
        # The scanner looks ahead over open brackets (quadratic in their number): stop early.
        if self.flow_level >= MAX_DEPTH:
            raise InputError(f"nests deeper than {MAX_DEPTH} levels (at line {self.line + 1})",
                             self.line + 1)
        super().fetch_flow_collection_start(TokenClass)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        # A value whose tag or form promises a type it does not hold (`!!int abc`, a timestamp
        # 2026-13-45) makes PyYAML's constructors raise plain Python errors: make them YAML's.
        try:
            return super().construct_object(node, deep=deep)
        except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError) as exc:
            value = f"{shown(node.value)} " if isinstance(node, ScalarNode) else ""
            reason = f" ({exc})" if isinstance(exc, ArithmeticError | ValueError) else ""
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConstructorError(None, None, f"the value {value}is not a valid {tag}{reason}",
                                   node.start_mark) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first: dict[Any, Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # keys merged with << may be overridden: that is their purpose
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:
                    raise ConstructorError(None, None, "found an unhashable key",
                                           key_node.start_mark) from None
                if earlier is not key_node:
                    raise InputError(
                        f"the key {key!r} is given twice, on line {_line(earlier)} and on line "
                        f"{_line(key_node)}; give each key once", _line(key_node))
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    def construct_yaml_int(self, node: ScalarNode) -> int:
        _check_number(node)
        return super().construct_yaml_int(node)  # type: ignore[no-any-return]

    def construct_yaml_float(self, node: ScalarNode) -> float:
        _check_number(node)
        return super().construct_yaml_float(node)  # type: ignore[no-any-return]


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)


def _check_number(node: ScalarNode) -> None:
    if len(node.value) > MAX_NUMBER_CHARS:
        raise InputError(f"a number of {len(node.value)} characters at line {_line(node)}; "
                         f"numbers have at most {MAX_NUMBER_CHARS}", _line(node))


def _check_expansion(root: Node) -> None:
    """Refuse a document whose aliases expand past :data:`MAX_NODES` nodes or
    :data:`MAX_DEPTH` levels, or refer to a node that contains them.

    Each distinct node is measured once (aliases share their node), so the cost is that of the
    text, however much it would expand.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, collection depth)
    open_nodes: set[int] = set()

    def measure(node: Node, above: int) -> tuple[int, int]:
        """Values under ``node`` and its depth in collections; ``above`` collections hold it."""
        key = id(node)
        if key in open_nodes:
            raise InputError(f"an alias at line {_line(node)} refers to a collection that "
                             "contains it; YAML cycles are not allowed", _line(node))
        if key not in measured:
            if not isinstance(node, (SequenceNode, MappingNode)):
                measured[key] = 1, 0
                return 1, 0
            if above >= MAX_DEPTH:  # checked before going down: the recursion stays bounded
                raise _too_deep(node)
            open_nodes.add(key)
            size, depth = 1, 1
            children = (node.value if isinstance(node, SequenceNode)
                        else [part for pair in node.value for part in pair])
            for child in children:
                child_size, child_depth = measure(child, above + 1)
                size += child_size
                depth = max(depth, child_depth + 1)
                if size > MAX_NODES:
                    raise InputError(f"expands to more than {MAX_NODES:,} values (aliases "
                                     "counted as often as they are used; the collection at "
                                     f"line {_line(node)} is past it)", _line(node))
            open_nodes.discard(key)
            measured[key] = size, depth
        size, depth = measured[key]
        if above + depth > MAX_DEPTH:
            raise _too_deep(node)
        return size, depth

    measure(root, 0)


def _too_deep(node: Node) -> InputError:
    return InputError(f"nests deeper than {MAX_DEPTH} levels once aliases are expanded (at "
                      f"line {_line(node)})", _line(node))
