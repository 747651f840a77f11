"""hw/INTERFACES.md documents every parameter each node declares (issue 36: an integrator
working from that page alone missed ten of them)."""

import importlib
import re
from pathlib import Path

import pytest

from handrail.hw.nodes import NODES

INTERFACES = Path(__file__).resolve().parents[2] / "hw" / "INTERFACES.md"


def section(name: str) -> str:
    """The text of the page's ``## `name` ...`` section."""
    text = INTERFACES.read_text()
    match = re.search(rf"^## `{name}`.*?(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"hw/INTERFACES.md has no section for {name}"
    return match.group(0)


@pytest.mark.parametrize("exe", sorted(NODES))
def test_every_declared_parameter_is_documented_in_its_nodes_section(exe: str) -> None:
    declared = importlib.import_module(NODES[exe]).PARAMETERS
    text = section(exe)
    missing = sorted(name for name in declared if f"`{name}`" not in text)
    assert not missing, f"{exe}: parameters not in hw/INTERFACES.md: {missing}"
