"""A strict YAML reader: PyYAML with the three traps of YAML 1.1 closed.

PyYAML follows YAML 1.1, where `1e-4` is a *string* (no dot), `no`/`off`/`yes`/`on` are
booleans, and a duplicated key silently keeps the last value. A spec is a scientific record, so
each of these is either fixed (YAML 1.2 floats and booleans) or refused (duplicate keys).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import UserError

# YAML 1.2 core schema float: accepts 1e-4, 1E5, .5, 5., -inf, .nan.
_FLOAT_12 = re.compile(
    r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_INT_12 = re.compile(r"^[-+]?[0-9]+$")


class StrictLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars and an error on duplicate mapping keys."""


# Drop YAML 1.1's implicit resolvers for bools and floats (yes/no/on/off, no-dot exponents)...
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# ...and install YAML 1.2's: only true/false are booleans; any decimal with an exponent is a float.
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            first = seen[key].start_mark.line + 1
            again = key_node.start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (lines {first} and {again})", key_node.start_mark
            )
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _int_or_float(loader: StrictLoader, node: yaml.ScalarNode) -> int | float:
    text = loader.construct_scalar(node)
    if _INT_12.match(text):
        return int(text)
    # .inf, .Inf, .INF, .nan, .NaN, .NAN (YAML 1.2) are Python's inf and nan; every other float reads as written.
    return float(text.replace(".", "", 1)) if text.lower().lstrip("+-") in (".inf", ".nan") else float(text)


StrictLoader.add_constructor("tag:yaml.org,2002:float", _int_or_float)


def loads(text: str, source: str = "<string>") -> Any:
    """Parse YAML text strictly; any problem becomes a one-line UserError naming the source."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: malformed YAML: {problem}") from None


# A spec or a study file is a few KB (the largest shipped, configs/studies/depth.yaml, is 6 KB); a
# 100 MB one took 33 s and 850 MB of memory to refuse. One line before reading, instead.
MAX_BYTES = 1 << 20


def load_file(path: str | Path) -> Any:
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES and path.is_file():
            raise UserError(f"{path}: {size / 2**20:.1f} MiB; a spec or study file is at most 1 MiB (a few KB is usual)")
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)  # a file that grew since: still no more than the limit read
        if len(text) > MAX_BYTES:
            raise UserError(f"{path}: over 1 MiB; a spec or study file is at most 1 MiB (a few KB is usual)")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    return loads(text, source=str(path))


def parse_scalar(text: str) -> Any:
    """Parse the value of `--set key=value` with the same rules as a spec file."""
    return loads(text, source="--set") if text.strip() else ""


class StrictDumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings StrictLoader would read as floats (`'1e5'`), so what we
    write reads back unchanged here and in any YAML 1.1 reader."""


StrictDumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_12, list("-+0123456789."))


def dumps(obj: Any, **kwargs: Any) -> str:
    return yaml.dump(obj, Dumper=StrictDumper, **kwargs)


# ---------------------------------------------------------------------------------------------
# Spec trees: the nested dicts a YAML file, the flags and `--set` are merged into before validation


def set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, creating sections; refuses to descend into a scalar."""
    keys = dotted.split(".")
    if not all(keys):
        raise UserError(f"--set {dotted}: empty key segment; expected dotted.key=value, e.g. optim.lr=0.05")
    node = tree
    for i, key in enumerate(keys[:-1]):
        nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict):
            raise UserError(f"--set {dotted}: '{'.'.join(keys[:i + 1])}' is a value, not a section")
        node = nxt
    node[keys[-1]] = value


def flat_dotted(tree: Any, prefix: str = "") -> dict[str, Any]:
    """set_dotted's inverse: {"optim": {"lr": 0.1}} as {"optim.lr": 0.1}; an empty section is kept
    as a value of its own."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(flat_dotted(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def parse_set(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise UserError(f"--set {item}: expected dotted.key=value, e.g. --set optim.lr=0.05")
    key, _, text = item.partition("=")
    return key.strip(), parse_scalar(text)


def merge(base: dict, over: dict) -> dict:
    """Deep-merge two spec trees (studies: a row's overrides onto the base spec)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
