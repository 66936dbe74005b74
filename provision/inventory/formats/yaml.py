"""The YAML inventory (Ansible's shape: all: {hosts, children, vars}), read strictly: a key written twice, or two keys YAML takes for one, is an error with its line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provision.core.errors import InputError, Problem
from provision.inventory.build import Vaulted, where_group


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor`


NAME_TAGS = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:value")  # `=` is YAML's "value" key: the string "="


def _yaml_error(exc: yaml.YAMLError) -> str:
    mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    text = "invalid YAML" + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "")
    text += f": {getattr(exc, 'problem', None) or exc}"
    if context is not None and getattr(exc, "context", None):
        text += f" ({exc.context} that starts at line {context.line + 1})"
    return text


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (PyYAML silently keeps the last), and two
    keys written differently that Python takes for the same key (`on:` and `yes:` are True, `1:` and `1.0:`)."""

    def construct_mapping(self, node, deep=False):
        texts = set()
        first: dict[Any, yaml.Node] = {}  # key as constructed -> the node that first wrote it
        for key_node, _ in node.value:  # before merging: a key given here may override one that `<<:` brings
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key = key_node.value if key_node.tag in NAME_TAGS else self.construct_object(key_node)
            if key_node.value in texts:
                problem = f"key {key_node.value!r} is written twice in the same mapping"
            elif key in first:
                problem = (f"keys {first[key].value!r} (line {first[key].start_mark.line + 1}) and "
                           f"{key_node.value!r} are both read by YAML as {key!r}: one mapping cannot hold both")
            else:
                texts.add(key_node.value)
                first[key] = key_node
                continue
            raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
        return super().construct_mapping(node, deep)


# Ansible Vault's inline values (`password: !vault |` and the ciphertext): kept as a marker, so that another
# role's secret is left alone and one in a variable provision reads is refused by name (build.py).
_StrictLoader.add_constructor("!vault", lambda loader, node: Vaulted())


def _name_key_problems(file: str, loader: _StrictLoader, root: yaml.Node | None) -> list[Problem]:
    """Every group or host name written as a YAML key that is not read as a string (`1:`, `true:`, `~:`).

    Walks the inventory's shape: top-level keys name groups; in a group, `hosts:` keys name hosts and
    `children:` keys name groups. Keys elsewhere (variables) may be anything."""
    problems: list[Problem] = []
    seen: set[int] = set()  # group bodies already walked: an alias may reuse one, even inside itself

    def names(mapping: yaml.Node, where: str, key: str) -> list[tuple[str, yaml.Node]]:
        found = []
        for name_node, value in _pairs(mapping):
            if not isinstance(name_node, yaml.ScalarNode):
                continue  # a list or mapping as a key is refused when constructed ("unhashable key")
            if name_node.tag not in NAME_TAGS:
                problems.append(Problem(
                    file, where, key, f"line {name_node.start_mark.line + 1}: {name_node.value!r} is read by YAML "
                    f"as {_key_kind(loader, name_node)}, not a name", f"quote it: '{name_node.value}':"))
            found.append((name_node.value, value))
        return found

    def group(name: str, body: yaml.Node) -> None:
        if id(body) in seen:
            return
        seen.add(id(body))
        parts = {k.value: v for k, v in _pairs(body) if isinstance(k, yaml.ScalarNode)}
        if "hosts" in parts:
            names(parts["hosts"], where_group(name), "hosts")
        for child, child_body in names(parts.get("children"), where_group(name), "children"):
            group(child, child_body)

    for name, body in names(root, "", ""):
        group(name, body)
    return problems


def _pairs(node: yaml.Node | None) -> list[tuple[yaml.Node, yaml.Node]]:
    """A mapping node's (key, value) nodes, after those that its `<<:` merge keys bring (so, in a dict of
    them, a key written here overrides a merged one, as in YAML); [] if not a mapping."""
    if not isinstance(node, yaml.MappingNode):
        return []
    merged, own = [], []
    for key, value in node.value:
        if key.tag != MERGE_TAG:
            own.append((key, value))
        else:
            for source in value.value if isinstance(value, yaml.SequenceNode) else [value]:
                merged += _pairs(source)
    return merged + own


def _key_kind(loader: _StrictLoader, node: yaml.ScalarNode) -> str:
    kind = node.tag.rpartition(":")[2]
    if kind in ("bool", "int", "float"):
        return f"the {'boolean' if kind == 'bool' else 'number'} {loader.construct_object(node)!r}"
    return "null (no value)" if kind == "null" else f"a {kind}"


def read(path: str | Path) -> Any:
    """The document of a YAML inventory file, as Python values; InputError for anything that is not one."""
    return _load(path, names=True)


def read_vars(path: str | Path) -> Any:
    """A variables file (group_vars/, host_vars/), as strictly; its keys are variables, not names."""
    return _load(path, names=False)


def _load(path: str | Path, names: bool) -> Any:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        if not names and text.startswith("$ANSIBLE_VAULT;"):  # a whole file encrypted (group_vars/all/vault.yml)
            return Vaulted()
        loader = _StrictLoader(text)
        try:
            # Names are checked on the node tree, before it becomes Python values: there `1:` and `true:` are
            # still two keys with their lines; in the dict they are one key, 1 or True, and no line.
            root = loader.get_single_node()
            name_problems = _name_key_problems(file, loader, root) if names else []
            if name_problems:
                raise InputError(name_problems)
            data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except OSError as exc:
        raise InputError([Problem(file, "", "", f"cannot read {'inventory' if names else 'variables file'}: "
                                                f"{exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise InputError([Problem(file, "", "", f"not a text file: byte {exc.start} is not UTF-8",
                                  "an inventory is a YAML text file; is this the right path?")]) from None
    except yaml.YAMLError as exc:
        raise InputError([Problem(file, "", "", _yaml_error(exc))]) from None
    except RecursionError:
        raise InputError([Problem(file, "", "", "invalid YAML: nested too deeply to read",
                                  "an inventory is a few levels of groups, hosts and settings")]) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise InputError([Problem(file, "", "", f"invalid YAML: {exc}")]) from None
    return data
