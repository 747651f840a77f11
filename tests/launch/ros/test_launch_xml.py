"""Reading ROS 2 XML launch files into NodeLaunch lists: each tag, substitution and loud error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from handrail.control.safety import SIM_ARM_LIMITS
from handrail.launch.ros.launch_xml import LAUNCH_DIR, LaunchError, NodeLaunch, arguments, parse


def write(folder: Path, body: str, name: str = "test.launch.xml") -> Path:
    """A launch file ``<launch>body</launch>`` in ``folder``."""
    path = folder / name
    path.write_text(f"<launch>\n{body}\n</launch>\n")
    return path


def one(nodes: list[NodeLaunch]) -> NodeLaunch:
    assert len(nodes) == 1, nodes
    return nodes[0]


def test_node_attributes_params_remaps_and_args(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("/**:\n  ros__parameters: {a: 1}\n")
    path = write(
        tmp_path,
        """<node pkg="handrail" exec="sim_robot" name="world" namespace="arm1" output="screen"
                 args="--flag 'two words'" respawn="true" respawn_delay="1.5">
             <param from="$(dirname)/p.yaml"/>
             <param name="task" value="reach"/>
             <remap from="target_pose" to="/ctrl/target"/>
             <remap from="ee_pose" to="pose"/>
           </node>""",
    )
    node = one(parse(path))
    assert (node.pkg, node.exec, node.name, node.namespace) == (
        "handrail",
        "sim_robot",
        "world",
        "/arm1",
    )
    assert node.fqn == "/arm1/world" and node.output == "screen"
    assert node.args == ["--flag", "two words"]
    assert node.param_files == [tmp_path / "p.yaml"]
    assert node.params == {"task": "reach"}
    assert node.remaps == [("target_pose", "/ctrl/target"), ("ee_pose", "pose")]
    assert node.respawn and node.respawn_delay_s == 1.5


def test_node_defaults_follow_ros2_launch(tmp_path: Path) -> None:
    node = one(parse(write(tmp_path, '<node pkg="handrail" exec="reset_node"/>')))
    assert (node.name, node.namespace, node.output, node.respawn) == ("", "/", "log", False)
    assert node.label == "reset_node" and node.fqn == "/reset_node"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1.0", 1.0),
        ("1", 1),
        ("-3", -3),
        ("true", True),
        ("False", False),
        ("[0.1, 0.2]", [0.1, 0.2]),
        ("[1, 2.5]", [1.0, 2.5]),  # a mixed list is a double array in ROS 2
        ("['a', 'b']", ["a", "b"]),
        ("pick_cube", "pick_cube"),
        ("", ""),
        ("{a: 1}", "{a: 1}"),  # no parameter type: the text
        ("[1, 'a']", "[1, 'a']"),
        ("2024-01-01", "2024-01-01"),
    ],
)
def test_param_values_are_typed_as_ros2_types_them(
    tmp_path: Path, text: str, value: object
) -> None:
    path = write(
        tmp_path, f'<node pkg="handrail" exec="sim_robot"><param name="p" value="{text}"/></node>'
    )
    got = one(parse(path)).params["p"]
    assert got == value and type(got) is type(value)


def test_args_defaults_command_line_and_let(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """<arg name="task" default="pick_cube" description="the task"/>
           <arg name="seed" default="0"/>
           <let name="label" value="$(var task)-$(var seed)"/>
           <node pkg="handrail" exec="sim_robot" name="$(var label)"/>""",
    )
    assert one(parse(path)).name == "pick_cube-0"
    assert one(parse(path, {"task": "reach"})).name == "reach-0"
    assert arguments(path) == [("task", "pick_cube", "the task"), ("seed", "0", "")]


def test_substitutions_env_dirname_find_pkg_share_and_nesting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANDRAIL_TEST_NS", "cell")
    monkeypatch.delenv("HANDRAIL_TEST_UNSET", raising=False)
    path = write(
        tmp_path,
        """<arg name="which" default="task"/>
           <arg name="task" default="reach"/>
           <node pkg="handrail" exec="sim_robot" namespace="$(env HANDRAIL_TEST_NS)">
             <param name="env_default" value="$(env HANDRAIL_TEST_UNSET 'a b')"/>
             <param name="dir" value="$(dirname)"/>
             <param name="share" value="$(find-pkg-share handrail)"/>
             <param name="nested" value="$(var $(var which))"/>
           </node>""",
    )
    node = one(parse(path))
    assert node.namespace == "/cell"
    assert node.params == {
        "env_default": "a b",
        "dir": str(tmp_path),
        "share": str(LAUNCH_DIR),
        "nested": "reach",
    }


def test_if_and_unless_on_node_group_include_and_arg(tmp_path: Path) -> None:
    write(tmp_path, '<node pkg="handrail" exec="reset_node" name="inc"/>', "inc.launch.xml")
    path = write(
        tmp_path,
        """<arg name="on" default="true"/>
           <arg name="x" default="from_default"/>
           <arg name="x" default="from_skipped_arg" if="false"/>
           <node pkg="handrail" exec="sim_robot" name="a" if="$(var on)"/>
           <node pkg="handrail" exec="sim_robot" name="b" unless="$(var on)"/>
           <group if="$(var on)"><node pkg="handrail" exec="sim_robot" name="c_$(var x)"/></group>
           <include file="inc.launch.xml" unless="$(var on)"/>""",
    )
    assert [n.name for n in parse(path)] == ["a", "c_from_default"]
    assert [n.name for n in parse(path, {"on": "False"})] == ["b", "inc"]
    assert [n.name for n in parse(path, {"on": "0"})] == ["b", "inc"]


def test_groups_scope_variables_and_namespaces(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """<let name="v" value="outer"/>
           <group>
             <push-ros-namespace namespace="arm1"/>
             <let name="v" value="inner"/>
             <node pkg="handrail" exec="sim_robot" name="in_$(var v)"/>
             <group>
               <push-ros-namespace namespace="left"/>
               <node pkg="handrail" exec="sim_robot" name="deep" namespace="cam"/>
               <node pkg="handrail" exec="sim_robot" name="abs" namespace="/top"/>
             </group>
           </group>
           <node pkg="handrail" exec="sim_robot" name="out_$(var v)"/>
           <group scoped="false">
             <push-ros-namespace namespace="leaky"/>
             <let name="v" value="leaked"/>
           </group>
           <node pkg="handrail" exec="sim_robot" name="after_$(var v)"/>""",
    )
    assert [n.fqn for n in parse(path)] == [
        "/arm1/in_inner",
        "/arm1/left/cam/deep",
        "/top/abs",
        "/out_outer",
        "/leaky/after_leaked",
    ]


def test_include_passes_args_and_namespace_and_keeps_its_variables(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "p.yaml").write_text("{}")
    write(
        sub,
        """<arg name="robot"/>
           <arg name="rate" default="10"/>
           <let name="secret" value="x"/>
           <node pkg="handrail" exec="safety_node" name="$(var robot)_safety">
             <param from="$(dirname)/p.yaml"/>
             <param name="rate" value="$(var rate)"/>
           </node>""",
        "arm.launch.xml",
    )
    path = write(
        tmp_path,
        """<arg name="rate" default="99"/>
           <group>
             <push-ros-namespace namespace="cell"/>
             <include file="$(dirname)/sub/arm.launch.xml"><arg name="robot" value="left"/></include>
             <include file="sub/arm.launch.xml">
               <arg name="robot" value="right"/><arg name="rate" value="$(var rate)"/>
             </include>
           </group>
           <node pkg="handrail" exec="sim_robot" name="n"><param name="s" value="$(var rate)"/></node>""",
    )
    left, right, own = parse(path)
    assert (left.fqn, left.params, left.param_files) == (
        "/cell/left_safety",
        {"rate": 10},
        [sub / "p.yaml"],
    )  # the included file's own default, not the parent's `rate`
    assert (right.fqn, right.params) == ("/cell/right_safety", {"rate": 99})
    assert own.params == {"s": 99}
    bad = write(tmp_path, '<include file="sub/arm.launch.xml"/>', "bad.launch.xml")
    with pytest.raises(
        LaunchError, match=r"arm\.launch\.xml: <arg>: 'robot' has no default; pass it"
    ):
        parse(bad)


def test_a_foreign_package_runs_from_the_ament_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / "prefix" / "lib" / "joy" / "joy_node"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "prefix" / "share" / "joy").mkdir(parents=True)
    monkeypatch.setenv(
        "AMENT_PREFIX_PATH", os.pathsep.join(["/nonexistent", str(tmp_path / "prefix")])
    )
    path = write(
        tmp_path,
        '<node pkg="joy" exec="joy_node"><param name="s" value="$(find-pkg-share joy)"/></node>',
    )
    node = one(parse(path))
    assert node.program == str(exe) and node.params == {"s": str(tmp_path / "prefix/share/joy")}


ERRORS = [
    # (body, tag named in the message, words of the fix)
    ('<timer period="1"/>', "<timer>", "handrail launch supports arg, group, include"),
    (
        '<node pkg="handrail" exec="sim_robot" launch-prefix="gdb"/>',
        "<node>",
        "it takes args, exec",
    ),
    (
        '<node pkg="handrail" exec="sim_robot"><env name="A" value="1"/></node>',
        "<env>",
        "use <param>",
    ),
    (
        '<node pkg="handrail" exec="sim_robot"><param name="a" valu="1"/></node>',
        "<param>",
        "it takes from",
    ),
    ('<arg name="a" default="$(eval 1+1)"/>', "<arg>", "supports var, env, dirname"),
    ('<arg name="a" default="$(var b)"/>', "<arg>", "declare it with <arg>"),
    ('<let name="a" value="$(env HANDRAIL_TEST_UNSET)"/>', "<let>", "give a default"),
    ('<arg name="robot"/>', "<arg>", "pass it as robot:=VALUE"),
    (
        '<node pkg="nav2_amcl" exec="amcl"/>',
        "<node>",
        "source the ROS 2 setup that provides nav2_amcl",
    ),
    ('<node pkg="handrail" exec="no_such_node"/>', "<node>", "use one of ['actor_node'"),
    ('<node pkg="handrail" exec="sim_robot" if="yes please"/>', "<node>", "use true or false"),
    (
        '<node pkg="handrail" exec="sim_robot" output="screens"/>',
        "<node>",
        "use one of screen, log, both",
    ),
    (
        '<node pkg="handrail" exec="sim_robot"><param from="nope.yaml"/></node>',
        "<param>",
        "fix from=",
    ),
    (
        '<node pkg="handrail" exec="sim_robot"/><node pkg="handrail" exec="sim_robot"/>',
        "<node>",
        "rename one",
    ),
    ('<include file="missing.launch.xml"/>', "<include>", "missing.launch.xml does not exist; fix"),
    (
        '<include file="x.launch.xml"><let name="a" value="1"/></include>',
        "<let>",
        "pass <arg name= value=>",
    ),
    ('<push-ros-namespace ns="a"/>', "<push-ros-namespace>", "it takes namespace"),
    ('<group><node pkg="handrail"/></group>', "<node>", "add exec="),
    ('<node pkg="handrail" exec="sim_robot" args="\'open"/>', "<node>", "balance its quotes"),
]


@pytest.mark.parametrize(
    ("body", "tag", "fix"), ERRORS, ids=[e[1] + " " + e[2][:24] for e in ERRORS]
)
def test_each_unsupported_or_wrong_thing_is_one_loud_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, tag: str, fix: str
) -> None:
    monkeypatch.delenv("HANDRAIL_TEST_UNSET", raising=False)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "empty"))
    path = write(tmp_path, body)
    with pytest.raises(LaunchError) as err:
        parse(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(path.parent)), message  # names the file
    assert tag in message and fix in message, message
    assert isinstance(err.value, ValueError)  # the CLI reports it as a user error


def test_command_line_argument_the_file_does_not_declare_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, '<arg name="task" default="reach"/>')
    with pytest.raises(LaunchError, match=r"no argument named tsk; it declares \['task'\]"):
        parse(path, {"tsk": "x"})


def test_not_a_launch_file(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text("<launch><node></launch>")
    with pytest.raises(LaunchError, match="not valid XML"):
        parse(tmp_path / "a.xml")
    (tmp_path / "b.xml").write_text("<robot/>")
    with pytest.raises(LaunchError, match="the root must be a bare <launch>"):
        parse(tmp_path / "b.xml")


def test_robot_yamls_limits_are_the_sim_arms_until_a_cell_sets_its_own() -> None:
    # Issue 33: one source of the sim arm's limits; the real arm's template repeats them, so it
    # must not drift from them (it once kept a box with an unreachable corner).
    params = yaml.safe_load((LAUNCH_DIR / "robot.yaml").read_text())["/**/safety_node"]
    limits = [name for name in params["ros__parameters"] if hasattr(SIM_ARM_LIMITS, name)]
    assert len(limits) == 6, limits
    for name in limits:
        want = getattr(SIM_ARM_LIMITS, name)
        assert params["ros__parameters"][name] == (list(want) if isinstance(want, tuple) else want)
