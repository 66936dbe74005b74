"""The YAML inventory (Ansible's shape: all: {hosts, children, vars}), read strictly: a key written twice, or two
keys YAML takes for one, is an error with its line. Aliases are bounded where Ansible just expands them: one inside
the value its anchor names (`a: &x [*x]`) is refused, and so are aliases that would repeat more than
MAX_ALIAS_VALUES values (a "billion laughs": ten lines of lists of aliases to the line above), before anything
walks the data they would build (merging, templating, validation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provision.core.errors import InputError, Problem
from provision.core.localfiles import read_text
from provision.inventory.model import where_group
from provision.inventory.values import Vaulted, kind_of
from provision.inventory.formats import ini


MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *anchor`


NAME_TAGS = ("tag:yaml.org,2002:str", "tag:yaml.org,2002:value")  # `=` is YAML's "value" key: the string "="
# The values (scalars, lists, mappings) aliases may add to one document, counted as each alias would repeat its
# anchor's value, aliases in it included: 30 shared settings for each of 30,000 hosts. The builder takes a million
# in under a second in another role's variable, about 3 s in a host's provision block (on a 2-core machine).
MAX_ALIAS_VALUES = 1_000_000


def _yaml_error(exc: yaml.YAMLError, invalid: str = "invalid YAML") -> str:
    mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    text = invalid + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark else "")
    text += f": {getattr(exc, 'problem', None) or exc}"
    said = getattr(exc, "context", None)  # only a MarkedYAMLError says where the construct started
    if context is not None and said:
        text += f" ({said} that starts at line {context.line + 1})"
    return text


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping (PyYAML silently keeps the last), two
    keys written differently that Python takes for the same key (`on:` and `yes:` are True, `1:` and `1.0:`),
    a recursive alias, and aliases past MAX_ALIAS_VALUES (counted on the nodes, as they are composed)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.values: dict[int, int] = {}  # id(node) -> the values it holds, each alias in it expanded
        self.repeated = 0  # the values the aliases composed so far add to the document

    def compose_node(self, parent, index):
        if not self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            inside = (node.value if isinstance(node, yaml.SequenceNode) else
                      [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
            self.values[id(node)] = 1 + sum(self.values[id(n)] for n in inside)
            return node
        event = self.peek_event()
        target = self.anchors.get(event.anchor)
        if target is not None:  # else PyYAML says "found undefined alias"
            if id(target) not in self.values:  # still being composed: the alias is inside it
                raise yaml.constructor.ConstructorError(
                    None, None, f"the alias *{event.anchor} is inside the value &{event.anchor} names (line "
                    f"{target.start_mark.line + 1}): a recursive alias, which provision refuses", event.start_mark)
            self.repeated += self.values[id(target)]
            if self.repeated > MAX_ALIAS_VALUES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"aliases expand the document by more than {MAX_ALIAS_VALUES:,} values "
                    f"(provision's limit); this alias, *{event.anchor}, passes it", event.start_mark)
        return super().compose_node(parent, index)

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
# role's secret is left alone and one in a variable provision reads is refused by name (validate.py).
_StrictLoader.add_constructor("!vault", lambda loader, node: Vaulted())


def _name_key_problems(file: str, loader: _StrictLoader, root: yaml.Node | None) -> list[Problem]:
    """Every group or host name written as a YAML key that is not read as a string (`1:`, `true:`, `~:`).

    Walks the inventory's shape: top-level keys name groups; in a group, `hosts:` keys name hosts and
    `children:` keys name groups. Keys elsewhere (variables) may be anything."""
    problems: list[Problem] = []
    seen: set[int] = set()  # group bodies already walked: an alias may reuse one, even inside itself

    def names(mapping: yaml.Node | None, where: str, key: str) -> list[tuple[str, yaml.Node]]:
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
    return inventory(read_text(path, "inventory"), str(path))


GROUP_SECTIONS = ("hosts", "children", "vars")


def inventory(text: str, file: str) -> dict[Any, Any]:
    """An inventory's YAML text as Ansible's yaml plugin takes it, in the builder's shape: host ranges in the keys
    under hosts: expanded (`gs-vcompute[01:05]:`, `node[a:c]:2222:`, one function with the INI reader's), a
    section written as one name (`children: galaxyservers`) read as that name, a host written with an empty value
    (`""`, 0) as one with none. InputError where the text is empty or not a mapping, or a range is wrong: the plugin
    fails there, and Ansible tries its next reader, INI. (A section that is a list or a number fails it too: the
    builder names that one, as INI could not read such a file either.)"""
    document = parse(text, file, names=True)
    if not document or not isinstance(document, dict):
        said = "the YAML is empty" if not document else f"the top level must be a mapping of groups, not {kind_of(document)}"
        raise InputError([Problem(file, "", "", said, "start with all: {hosts: ..., children: ..., vars: ...}")])
    if isinstance(document.get("plugin"), str):
        return document  # an inventory plugin's configuration, not an inventory: the caller names it
    return _Plugin(file).groups(document)


class _Plugin:
    """One file's groups, read as Ansible's yaml plugin reads them (_parse_group, _parse_host)."""

    def __init__(self, file: str):
        self.file = file
        self.ranged = 0  # the hosts the file's ranges named so far: bounded as an INI file's (MAX_RANGE_HOSTS)

    def groups(self, mapping: dict[Any, Any]) -> dict[Any, Any]:
        return {name: self.group(str(name), body) for name, body in mapping.items()}

    def group(self, name: str, body: Any) -> Any:
        if not isinstance(body, dict):
            return body  # None is a group with nothing in it; anything else the builder refuses, named
        read = dict(body)
        for section in GROUP_SECTIONS:
            if isinstance(read.get(section), str):  # `children: galaxyservers`: the plugin's "strings are allowed"
                read[section] = {read[section]: None}
        # A section that is a list or a number fails the plugin (and then INI): the builder refuses it, named.
        if isinstance(read.get("hosts"), dict):
            read["hosts"] = self.hosts(name, read["hosts"])
        if isinstance(read.get("children"), dict):
            read["children"] = self.groups(read["children"])
        return read

    def hosts(self, group: str, patterns: dict[Any, Any]) -> dict[str, Any]:
        hosts: dict[str, Any] = {}
        for pattern, variables in patterns.items():
            variables = variables or None  # `h1: ""` or `h1: 0`: the plugin reads `value or {}`
            names, port = self.expand(group, str(pattern))
            if port is not None:  # NAME:PORT first, then the host's own ansible_port, as the plugin sets them
                variables = {"ansible_port": port, **variables} if isinstance(variables, dict) else (
                    variables or {"ansible_port": port})  # a value that is not a mapping: the builder refuses it
            for name in names:
                hosts[name] = _merged(hosts.get(name), variables)
        return hosts

    def expand(self, group: str, pattern: str) -> tuple[list[str], int | None]:
        try:
            names, port = ini.host_pattern(pattern, 0, ini.MAX_RANGE_HOSTS - self.ranged)
        except ini.IniError as exc:
            raise InputError([Problem(self.file, where_group(group), f"hosts.{pattern}", exc.message,
                                      exc.hint)]) from None
        self.ranged += len(names) if ini.RANGE.search(pattern) else 0
        return names, port


def _merged(before: Any, variables: Any) -> Any:
    """A host written twice in one hosts: mapping (`node[1:2]:` and `node1:`): each variable set again, as the
    plugin sets them one by one."""
    if isinstance(before, dict) and isinstance(variables, dict):
        return {**before, **variables}
    return variables if variables is not None else before


def opens_as_mapping(text: str) -> bool:
    """Whether YAML reads the text's first document as a mapping, whatever errors come further in."""
    try:
        loader = yaml.SafeLoader(text)  # refuses a control character at once
        events = [loader.get_event() for _ in range(3)]  # the stream's start, the document's, then its root
    except yaml.YAMLError:
        return False
    return isinstance(events[-1], yaml.MappingStartEvent)


def read_vars(path: str | Path) -> Any:
    """A variables file (group_vars/, host_vars/), as strictly; its keys are variables, not names."""
    text = read_text(path, "variables file")
    if text.startswith("$ANSIBLE_VAULT;"):  # a whole file encrypted (group_vars/all/vault.yml)
        return Vaulted()
    return parse(text, str(path), names=False)


def parse(text: str, file: str, names: bool = False, invalid: str = "invalid YAML") -> Any:
    """YAML text as Python values, strictly (names: the text is an inventory, its keys host and group names);
    InputError naming `file` for anything else, its message starting with `invalid` for what YAML refuses."""
    try:
        loader = _StrictLoader(text)
        try:
            # Names are checked on the node tree, before it becomes Python values: there `1:` and `true:` are
            # still two keys with their lines; in the dict they are one key, 1 or True, and no line.
            root = loader.get_single_node()
            name_problems = _name_key_problems(file, loader, root) if names else []
            if name_problems:
                raise InputError(name_problems)
            return loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise InputError([Problem(file, "", "", _yaml_error(exc, invalid))]) from None
    except RecursionError:
        raise InputError([Problem(file, "", "", f"{invalid}: nested too deeply to read",
                                  "an inventory is a few levels of groups, hosts and settings")]) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise InputError([Problem(file, "", "", f"{invalid}: {exc}")]) from None
