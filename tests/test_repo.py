"""Repository-wide checks: lint, format, import layering, packaging."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from handrail.hw.nodes import NODES

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_ruff_lint_is_clean() -> None:
    result = _run(str(BIN / "ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = _run(str(BIN / "ruff"), "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_follow_architecture() -> None:
    """The layer table of ARCHITECTURE.md, encoded as import-linter contracts."""
    result = _run(str(BIN / "lint-imports"), "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout, result.stdout


def test_no_two_modules_import_each_other() -> None:
    """No import cycle between modules, lazy imports inside functions included (imports only
    for type checking excepted): each module can be read, and changed, before those it uses."""
    import grimp

    graph = grimp.build_graph("handrail", exclude_type_checking_imports=True)
    cycles = [
        " -> ".join(chain)
        for module in sorted(graph.modules)
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith("handrail.") and imported != module
        for chain in [graph.find_shortest_chain(importer=imported, imported=module)]
        if chain is not None
    ]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_package_folder_is_a_flat_list() -> None:
    """A folder holds one concern: at most about 15 modules side by side (ARCHITECTURE.md)."""
    crowded = {
        str(init.parent.relative_to(ROOT)): n
        for init in ROOT.rglob("__init__.py")
        if not {".venv", "tests", "build"} & set(init.relative_to(ROOT).parts)
        for n in [len(list(init.parent.glob("*.py")))]
        if n > 16
    }
    assert not crowded, f"package folders with more than 16 modules: {crowded}"


def test_every_subpackage_is_packaged() -> None:
    """A folder with __init__.py that pyproject does not list would vanish from a wheel install."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = {"handrail"}
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if (
            not rel.parts
            or rel.parts[0] in {"tests", ".venv", "build"}
            or rel.parts[0].startswith(".")
        ):
            continue
        found.add(".".join(("handrail", *rel.parts)))
    assert found == listed, (
        f"pyproject packages differ: missing {found - listed}, extra {listed - found}"
    )


def test_bare_layer_names_are_not_importable_as_top_level() -> None:
    """`control` must not shadow python-control: handrail installs only the handrail package."""
    code = "import importlib.util as u, sys; sys.path = [p for p in sys.path if p not in ('', '.')]; print(u.find_spec('control') is None or 'handrail' not in str(u.find_spec('control').origin))"
    result = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True)
    assert result.stdout.strip() == "True", result.stdout + result.stderr


TYPED_PACKAGES = ("control", "sim", "learners", "demos", "hw", "launch", "app", "bench", "examples")
"""Every package of handrail (the tests are not type-checked)."""


def test_every_package_passes_mypy(tmp_path: Path) -> None:
    """CONVENTIONS.md: mypy is clean on every package (all of them, tests aside).

    The repository root is the handrail package, so mypy is pointed at a `handrail` link to it:
    module names then never depend on what the checkout's folder is called.
    """
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name != "tests")
    assert packages == sorted(TYPED_PACKAGES), "a new package: add it to TYPED_PACKAGES"
    (tmp_path / "handrail").symlink_to(ROOT, target_is_directory=True)
    selected = [arg for name in TYPED_PACKAGES for arg in ("-p", f"handrail.{name}")]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "cache"), *selected],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout, result.stdout


def test_wheel_install_works_without_the_source_tree(tmp_path: Path) -> None:
    """A regular (non-editable) install carries every subpackage, FORMAT.md, the launch files,
    and the ROS 2 package `handrail` (ament index entry, package.xml, launch files, node scripts)
    that `ros2 launch handrail sim_robot.launch.xml` needs."""
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         str(ROOT), "-w", str(wheel_dir)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    wheel = next(wheel_dir.glob("handrail-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    data = "-".join(wheel.name.split("-")[:2]) + ".data/data/"  # installed under sys.prefix
    for path in ("share/ament_index/resource_index/packages/handrail", "share/handrail/package.xml",
                 "share/handrail/launch/sim_robot.launch.xml", "share/handrail/launch/sim_robot.yaml",
                 "share/handrail/launch/robot.launch.xml", "share/handrail/launch/robot.yaml"):  # fmt: skip
        assert data + path in modes, f"{path} is not in the wheel"
    for exec_name in NODES:
        assert modes.get(data + f"lib/handrail/{exec_name}", 0) & 0o111, f"lib/handrail/{exec_name}"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]; "
        "import handrail.sim, handrail.demos, handrail.learners.agents.sac, handrail.launch.cli; "
        "import importlib.resources as r; "
        "assert r.files('handrail.demos').joinpath('FORMAT.md').is_file(); "
        "from handrail.launch.ros import runner as ros_launch; "
        "assert ros_launch.parse(ros_launch.resolve('sim_robot.launch.xml')); "
        "assert str(ros_launch.LAUNCH_DIR).startswith(sys.argv[1]); "
        "print(handrail.sim.__file__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(target)], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(target)), result.stdout
