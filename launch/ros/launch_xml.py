"""The ROS 2 XML launch format, the subset handrail uses, read into a list of :class:`NodeLaunch`.

Nothing is started here (see :mod:`handrail.launch.ros.runner`); anything outside the subset is
refused by name with the file, the tag and what to change, never ignored:

- tags: ``launch``; ``arg`` (name, default, description); ``let`` (name, value); ``node`` (pkg,
  exec, name, namespace, output, args, respawn, respawn_delay) with ``param`` (name + value, or
  from = a YAML file) and ``remap`` (from, to); ``group`` (scoped) holding
  ``push-ros-namespace`` (namespace); ``include`` (file) with ``arg`` (name, value) children.
  ``if``/``unless`` on arg, let, node, group and include.
- substitutions, nestable: ``$(var NAME)``, ``$(env NAME)``, ``$(env NAME DEFAULT)``,
  ``$(dirname)``, ``$(find-pkg-share PKG)`` (handrail's is the folder of its launch files;
  another package's is looked up under AMENT_PREFIX_PATH, as are its executables).

Parameter values are typed as ROS 2 types them (the text parsed as YAML: ``1`` is an integer,
``1.0`` a float, ``true`` a bool, ``[0.1, 0.2]`` a list, anything else a string). Unlike
``ros2 launch``, an included file sees only the arguments its ``<include>`` passes, and passing
an argument a file does not declare is an error, so that a typo cannot go unnoticed.
"""

from __future__ import annotations

import os
import shlex
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from handrail.hw.nodes import NODES, PACKAGE

__all__ = ["LAUNCH_DIR", "LaunchError", "NodeLaunch", "arguments", "parse", "typed"]

LAUNCH_DIR = Path(__file__).parent
"""handrail's launch files and their parameter files (``$(find-pkg-share handrail)``)."""

# Attributes each tag may have; any other is refused.
_ATTRS: dict[str, frozenset[str]] = {
    "arg": frozenset({"name", "default", "description", "if", "unless"}),
    "let": frozenset({"name", "value", "if", "unless"}),
    "node": frozenset(
        {"pkg", "exec", "name", "namespace", "output", "args", "respawn", "respawn_delay"}
        | {"if", "unless"}
    ),
    "group": frozenset({"scoped", "if", "unless"}),
    "push-ros-namespace": frozenset({"namespace"}),
    "include": frozenset({"file", "if", "unless"}),
}
_CHILD_ATTRS: dict[tuple[str, str], frozenset[str]] = {
    ("node", "param"): frozenset({"name", "value", "from"}),
    ("node", "remap"): frozenset({"from", "to"}),
    ("include", "arg"): frozenset({"name", "value"}),
}
_BOOLS = {"true": True, "1": True, "false": False, "0": False}
_OUTPUTS = ("screen", "log", "both")


class LaunchError(ValueError):
    """A launch file (or command line) that this runner cannot start; the message says why."""


@dataclass
class NodeLaunch:
    """One node to start, as a launch file describes it."""

    pkg: str
    """ROS 2 package; ``handrail`` nodes run as ``python -m`` the module NODES names."""
    exec: str
    """Executable name (a key of NODES for handrail)."""
    name: str = ""
    """Node name given by the launch file; empty keeps the node's own."""
    namespace: str = "/"
    """Absolute namespace (pushed namespaces joined with the node's own)."""
    params: dict[str, Any] = field(default_factory=dict)
    """``<param name= value=>``, typed as ROS 2 types them."""
    param_files: list[Path] = field(default_factory=list)
    """``<param from=>`` files, in order."""
    remaps: list[tuple[str, str]] = field(default_factory=list)
    """``<remap from= to=>`` pairs, in order."""
    args: list[str] = field(default_factory=list)
    """Extra arguments before ``--ros-args`` (``args=``, split like a shell)."""
    output: str = "log"
    """``screen``: both streams to the terminal; ``log``: stdout only to the log file (ROS 2's
    default); ``both``: both streams to terminal and log file."""
    respawn: bool = False
    """Start the node again whenever it exits (until the launch stops)."""
    respawn_delay_s: float = 0.0
    """Seconds to wait before a respawn."""
    program: str = ""
    """The executable of a non-handrail package (found under AMENT_PREFIX_PATH)."""

    @property
    def label(self) -> str:
        """The name its output lines are prefixed with: its name, else its executable."""
        return self.name or self.exec

    @property
    def fqn(self) -> str:
        """Fully qualified node name (``/ns/name``)."""
        return self.namespace.rstrip("/") + "/" + self.label


@dataclass
class _Scope:
    """What substitutions and nodes see at one point of a launch file."""

    file: Path
    vars: dict[str, str]
    namespace: str = "/"

    def error(self, tag: str, problem: str, fix: str) -> LaunchError:
        return LaunchError(f"{self.file}: <{tag}>: {problem}; {fix}")


def parse(path: str | Path, args: dict[str, str] | None = None) -> list[NodeLaunch]:
    """The nodes a launch file starts, given its arguments (name -> value).

    Args:
        path: the launch file.
        args: values for the file's ``<arg>`` declarations (``name:=value`` on the command line).

    Returns:
        The nodes in the order the file (and its includes) lists them.

    Raises:
        LaunchError: naming the file, the tag and what to change.
    """
    file = Path(path).resolve()
    nodes: list[NodeLaunch] = []
    _parse_file(file, dict(args or {}), "/", nodes)
    seen: set[str] = set()
    for node in nodes:
        if node.fqn in seen:
            raise LaunchError(f"{file}: <node>: two nodes are named {node.fqn}; rename one")
        seen.add(node.fqn)
    return nodes


def _parse_file(file: Path, args: dict[str, str], namespace: str, nodes: list[NodeLaunch]) -> None:
    if not file.is_file():
        raise LaunchError(f"{file}: no such launch file; check the path")
    try:
        root = ET.parse(file).getroot()
    except ET.ParseError as err:
        raise LaunchError(f"{file}: not valid XML ({err}); fix the file") from None
    scope = _Scope(file, {}, namespace)
    if root.tag != "launch" or root.attrib:
        raise scope.error(root.tag, "the root must be a bare <launch>", "wrap the file in it")
    declared = {el.get("name", "") for el in _declarations(root)}
    unknown = sorted(set(args) - declared)
    if unknown:
        raise scope.error(
            "arg", f"no argument named {', '.join(unknown)}", f"it declares {sorted(declared)}"
        )
    _actions(root, scope, args, nodes)


def _declarations(parent: ET.Element) -> list[ET.Element]:
    """The ``<arg>`` declarations under ``parent`` and its groups (not an include's arguments)."""
    found = []
    for el in parent:
        if el.tag == "arg":
            found.append(el)
        elif el.tag == "group":
            found += _declarations(el)
    return found


def arguments(path: str | Path) -> list[tuple[str, str | None, str]]:
    """The arguments a launch file declares: (name, default or None if required, description)."""
    root = ET.parse(path).getroot()
    return [
        (el.get("name", ""), el.get("default"), el.get("description", ""))
        for el in _declarations(root)
    ]


def _actions(
    parent: ET.Element, scope: _Scope, args: dict[str, str], nodes: list[NodeLaunch]
) -> None:
    """Run the actions under ``parent`` in order, updating ``scope`` and appending to ``nodes``."""
    for el in parent:
        if el.tag not in _ATTRS:
            raise scope.error(
                el.tag,
                f"unsupported tag inside <{parent.tag}>",
                f"handrail launch supports {', '.join(sorted(_ATTRS))} (or use ros2 launch)",
            )
        _check_attrs(el, _ATTRS[el.tag], scope)
        if not _condition(el, scope):
            continue
        if el.tag == "arg":
            name = _required(el, "name", scope)
            if name in args:
                scope.vars[name] = args[name]
            elif "default" in el.attrib:
                scope.vars[name] = _sub(el.attrib["default"], scope, "arg")
            else:
                raise scope.error("arg", f"{name!r} has no default", f"pass it as {name}:=VALUE")
        elif el.tag == "let":
            scope.vars[_required(el, "name", scope)] = _sub(
                _required(el, "value", scope), scope, "let"
            )
        elif el.tag == "node":
            nodes.append(_node(el, scope))
        elif el.tag == "group":
            scoped = _bool(el.get("scoped", "true"), scope, "group", "scoped")
            inner = _Scope(scope.file, dict(scope.vars), scope.namespace) if scoped else scope
            _actions(el, inner, args, nodes)
        elif el.tag == "push-ros-namespace":
            ns = _sub(_required(el, "namespace", scope), scope, el.tag)
            scope.namespace = _join_namespace(scope.namespace, ns)
        else:
            _include(el, scope, nodes)


def _check_attrs(el: ET.Element, allowed: frozenset[str], scope: _Scope) -> None:
    unknown = sorted(set(el.attrib) - allowed)
    if unknown:
        raise scope.error(
            el.tag,
            f"unsupported attribute {', '.join(unknown)}",
            f"it takes {', '.join(sorted(allowed))}",
        )


def _required(el: ET.Element, attr: str, scope: _Scope) -> str:
    value = el.get(attr)
    if value is None:
        raise scope.error(el.tag, f"the attribute {attr}= is missing", f"add {attr}=")
    return value


def _bool(text: str, scope: _Scope, tag: str, attr: str) -> bool:
    value = _BOOLS.get(_sub(text, scope, tag).strip().lower())
    if value is None:
        raise scope.error(tag, f"{attr}={text!r} is not a boolean", "use true or false")
    return value


def _condition(el: ET.Element, scope: _Scope) -> bool:
    """Whether ``el`` applies: its ``if=`` is true and its ``unless=`` is false."""
    if "if" in el.attrib and not _bool(el.attrib["if"], scope, el.tag, "if"):
        return False
    return not ("unless" in el.attrib and _bool(el.attrib["unless"], scope, el.tag, "unless"))


def _node(el: ET.Element, scope: _Scope) -> NodeLaunch:
    def sub(attr: str, default: str | None = None) -> str:
        text = el.get(attr, default)
        return _sub(_required(el, attr, scope) if text is None else text, scope, "node")

    node = NodeLaunch(sub("pkg"), sub("exec"), sub("name", ""), namespace=scope.namespace)
    if node.pkg == PACKAGE and node.exec not in NODES:
        raise scope.error(
            "node", f"exec={node.exec!r} is not a {PACKAGE} node", f"use one of {sorted(NODES)}"
        )
    if node.pkg != PACKAGE:
        found = _ament_path(f"lib/{node.pkg}/{node.exec}")
        if found is None or not os.access(found, os.X_OK):
            raise scope.error(
                "node",
                f"no executable lib/{node.pkg}/{node.exec} under AMENT_PREFIX_PATH",
                f"source the ROS 2 setup that provides {node.pkg}, or start that node separately",
            )
        node.program = str(found)
    node.namespace = _join_namespace(scope.namespace, sub("namespace", ""))
    node.args = _split(sub("args", ""), scope, "node")
    node.output = sub("output", "log")
    if node.output not in _OUTPUTS:
        raise scope.error("node", f"output={node.output!r}", f"use one of {', '.join(_OUTPUTS)}")
    node.respawn = _bool(el.get("respawn", "false"), scope, "node", "respawn")
    try:
        node.respawn_delay_s = float(sub("respawn_delay", "0"))
    except ValueError:
        raise scope.error("node", "respawn_delay is not a number", "give seconds") from None
    for child in el:
        attrs = _CHILD_ATTRS.get(("node", child.tag))
        if attrs is None:
            raise scope.error(child.tag, "not allowed inside <node>", "use <param> or <remap>")
        _check_attrs(child, attrs, scope)
        values = {k: _sub(v, scope, child.tag) for k, v in child.attrib.items()}
        plain = child.tag == "param" and "from" not in values
        for attr in ("name", "value") if plain else ("from", "to") if child.tag == "remap" else ():
            _required(child, attr, scope)
        if child.tag == "remap":
            node.remaps.append((values["from"], values["to"]))
        elif plain:
            node.params[values["name"]] = typed(values["value"])
        elif {"name", "value"} & set(values):
            raise scope.error("param", "from= with name= or value=", "give one or the other")
        else:
            path = Path(values["from"]).resolve()
            if not path.is_file():
                raise scope.error("param", f"parameter file {path} does not exist", "fix from=")
            node.param_files.append(path)
    return node


def _include(el: ET.Element, scope: _Scope, nodes: list[NodeLaunch]) -> None:
    target = Path(_sub(_required(el, "file", scope), scope, "include"))
    args: dict[str, str] = {}
    for child in el:
        attrs = _CHILD_ATTRS.get(("include", child.tag))
        if attrs is None:
            raise scope.error(child.tag, "not allowed inside <include>", "pass <arg name= value=>")
        _check_attrs(child, attrs, scope)
        args[_required(child, "name", scope)] = _sub(_required(child, "value", scope), scope, "arg")
    file = (target if target.is_absolute() else scope.file.parent / target).resolve()
    if not file.is_file():
        raise scope.error("include", f"{file} does not exist", "fix file=")
    _parse_file(file, args, scope.namespace, nodes)


def _sub(text: str, scope: _Scope, tag: str) -> str:
    """``text`` with every ``$(...)`` substituted, innermost first."""
    out, i = [], 0
    while (start := text.find("$(", i)) >= 0:
        out.append(text[i:start])
        depth, j = 1, start + 2
        while j < len(text) and depth:
            if text.startswith("$(", j):
                depth, j = depth + 1, j + 2
                continue
            depth -= text[j] == ")"
            j += 1
        if depth:
            raise scope.error(tag, f"unclosed $( in {text!r}", "close it with )")
        out.append(_substitution(_sub(text[start + 2 : j - 1], scope, tag), scope, tag))
        i = j
    out.append(text[i:])
    return "".join(out)


def _substitution(body: str, scope: _Scope, tag: str) -> str:
    kind, *rest = _split(body, scope, tag) or [""]
    if kind == "var" and len(rest) == 1:
        if rest[0] not in scope.vars:
            raise scope.error(tag, f"$(var {rest[0]}) is not defined", "declare it with <arg>")
        return scope.vars[rest[0]]
    if kind == "env" and len(rest) in (1, 2):
        value = os.environ.get(rest[0], rest[1] if len(rest) == 2 else None)
        if value is None:
            raise scope.error(
                tag, f"environment variable {rest[0]} is not set", "set it, or give a default"
            )
        return value
    if kind == "dirname" and not rest:
        return str(scope.file.parent)
    if kind == "find-pkg-share" and len(rest) == 1:
        share = LAUNCH_DIR if rest[0] == PACKAGE else _ament_path(f"share/{rest[0]}")
        if share is None:
            raise scope.error(tag, f"package {rest[0]!r} not found", "source its ROS 2 setup")
        return str(share)
    raise scope.error(
        tag,
        f"unsupported substitution $({body})",
        "handrail launch supports var, env, dirname and find-pkg-share",
    )


def _split(text: str, scope: _Scope, tag: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as err:
        raise scope.error(tag, f"cannot split {text!r} ({err})", "balance its quotes") from None


def _ament_path(relative: str) -> Path | None:
    """The first ``<prefix>/<relative>`` that exists, over AMENT_PREFIX_PATH."""
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix and (Path(prefix) / relative).exists():
            return Path(prefix) / relative
    return None


def _join_namespace(base: str, ns: str) -> str:
    parts = [] if ns.startswith("/") else base.split("/")
    joined = "/".join(p for p in [*parts, *ns.split("/")] if p)
    return "/" + joined


def typed(text: str) -> Any:
    """A ``<param value=>`` typed as ROS 2 types it: YAML-parsed, a string if YAML gives no
    parameter type (an integer/float mix in a list becomes floats)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list) and value:
        kinds = {type(v) for v in value}
        if kinds == {int, float}:
            return [float(v) for v in value]
        if len(kinds) == 1 and kinds <= {bool, int, float, str}:
            return value
    return text
