"""The task list: the module files of sim/tasks/, listed without importing them."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from handrail import sim
from handrail.app import envs
from handrail.sim import tasks

TASK_DIR = Path(tasks.__file__).parent


@pytest.mark.parametrize("name", tasks.task_names())
def test_each_task_module_is_named_after_its_task(name: str) -> None:
    module = importlib.import_module(f"handrail.sim.tasks.{name}")
    assert module.TASK.name == name


def test_the_task_list_is_the_folder() -> None:
    on_disk = sorted(p.stem for p in TASK_DIR.glob("*.py") if not p.name.startswith("_"))
    assert list(tasks.task_names()) == on_disk
    assert {"reach", "pick_cube", "peg_insert", "push"} <= set(on_disk)
    assert tasks.task_names() == sim.TASKS and envs.HANDRAIL_TASKS is sim.TASKS
    assert sim.available_tasks() == sim.TASKS


@pytest.fixture
def drop_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., None]]:
    """Puts files into a second folder of the sim.tasks package, as if added to sim/tasks/."""
    added: list[str] = []

    def add(**files: str) -> None:
        for stem, text in files.items():
            (tmp_path / f"{stem}.py").write_text(text)
            added.append(stem)
        importlib.invalidate_caches()
        monkeypatch.setattr(tasks, "__path__", [*tasks.__path__, str(tmp_path)])
        monkeypatch.setattr(tasks, "_REGISTRY", {})

    yield add
    for stem in added:
        sys.modules.pop(f"handrail.sim.tasks.{stem}", None)
        if hasattr(tasks, stem):
            delattr(tasks, stem)


REACH_AS = (
    "from handrail.sim.base import TaskSpec\nfrom handrail.sim.tasks.reach import TASK as R\n"
)


def test_a_new_task_file_is_listed_without_being_imported(drop_in: Callable[..., None]) -> None:
    drop_in(fly="raise RuntimeError('imported')\n", _util="")
    assert tasks.task_names() == tuple(sorted([*sim.TASKS, "fly"]))


def test_a_new_task_file_is_enough_to_make_its_env(drop_in: Callable[..., None]) -> None:
    drop_in(fly=REACH_AS + "TASK = TaskSpec('fly', R.config_cls, R.env_cls, R.expert_cls)\n")
    assert "fly" in sim.available_tasks()
    env = sim.make("fly", episode_steps=3)
    assert env.action_space.shape == sim.make("reach").action_space.shape
    env.close()


def test_a_task_named_unlike_its_file_is_an_error(drop_in: Callable[..., None]) -> None:
    drop_in(fly=REACH_AS + "TASK = TaskSpec('walk', R.config_cls, R.env_cls, R.expert_cls)\n")
    with pytest.raises(ValueError, match=r"TASK.name is 'walk'.*'fly'"):
        sim.make("reach")


def test_a_task_file_without_task_is_an_error(drop_in: Callable[..., None]) -> None:
    drop_in(fly="X = 1\n")
    with pytest.raises(TypeError, match=r"tasks\.fly defines no TASK"):
        sim.make("reach")


def test_listing_the_tasks_imports_no_mujoco() -> None:
    code = (
        "import sys, handrail.app.envs, handrail.sim; "
        "print(len(handrail.sim.TASKS), 'mujoco' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == [str(len(sim.TASKS)), "False"], result.stderr


def test_cameras_render_on_a_headless_machine_without_mujoco_gl_set() -> None:
    # MuJoCo's own default (GLFW) needs a display: a camera run failed at its first frame.
    env = {k: v for k, v in os.environ.items()
           if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}  # fmt: skip
    code = (
        "import os; from handrail import sim; "
        "env = sim.make('reach', cameras=('front',), image_size=16); "
        "obs, _ = env.reset(seed=0); print(obs['front'].shape, obs['front'].max() > 0, "
        "os.environ['MUJOCO_GL'])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert result.stdout.split() == ["(16,", "16,", "3)", "True", "egl"], result.stderr[-2000:]
