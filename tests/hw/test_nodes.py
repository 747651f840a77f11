"""Node start-up checks over real ROS 2 (private network namespace)."""

import pytest

from handrail.hw.nodes import NODES


@pytest.mark.parametrize("exe", ["safety_node", "actor_node"])
def test_a_node_refuses_a_parameter_it_does_not_declare(ros, exe):
    out = ros(
        rf"""
import json, subprocess, sys
proc = subprocess.run([sys.executable, "-m", "{NODES[exe]}", "--ros-args", "-p", "workspace_low:=[0.1, 0.1, 0.1]"],
                      capture_output=True, text=True, timeout=60)
print(json.dumps({{"code": proc.returncode, "err": proc.stderr.strip().splitlines()[-1]}}))
"""
    )
    assert out["code"] == 2
    assert (
        out["err"].startswith("error: ") and "unknown parameter(s) ['workspace_low']" in out["err"]
    )
