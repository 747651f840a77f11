"""Config checks shared by the peg_insert and push tasks."""

from __future__ import annotations

from handrail.control.safety import SafetyLimits


def check_region(
    name: str, low: tuple[float, ...], high: tuple[float, ...], safety: SafetyLimits
) -> None:
    """Raise ValueError unless the xy region is ordered and inside the reachable table area.

    Args:
        name: field prefix used in the message, e.g. "hole" for hole_low_m / hole_high_m.
        low: lower (x, y) corner (m).
        high: upper (x, y) corner (m).
        safety: the env's safety limits; their workspace box lies inside the table top.
    """
    if len(low) != 2 or len(high) != 2:
        raise ValueError(f"{name}_low_m and {name}_high_m must be (x, y) pairs in m")
    if any(lo > hi for lo, hi in zip(low, high, strict=True)):
        raise ValueError(f"{name}_low_m {low} must be <= {name}_high_m {high} on each axis")
    ws_lo, ws_hi = safety.workspace_low_m[:2], safety.workspace_high_m[:2]
    if any(lo < w for lo, w in zip(low, ws_lo, strict=True)) or any(
        hi > w for hi, w in zip(high, ws_hi, strict=True)
    ):
        raise ValueError(
            f"the {name} region {low}..{high} (m) lies outside the reachable table area "
            f"x in [{ws_lo[0]}, {ws_hi[0]}], y in [{ws_lo[1]}, {ws_hi[1]}] (the safety "
            f"workspace); move {name}_low_m / {name}_high_m inside it"
        )
