"""ResNet-10 as a frozen encoder: the network's shape, the conversion of SERL's params (names,
shapes, the file forms) and ``handrail encoder import-resnet10`` through to a run."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from handrail.launch import cli
from handrail.learners.agents.resnet import SERL_NAMES, ResNet10, params_from_serl, template


def serl_tree(params: Any) -> dict[str, Any]:
    """``params`` under SERL's module names (as its resnet10_params.pkl holds them)."""
    back = {ours: theirs for theirs, ours in SERL_NAMES.items()}
    return {back.get(k, k): serl_tree(v) if isinstance(v, dict) else np.asarray(v)
            for k, v in params.items()}  # fmt: skip


def test_resnet10_has_resnet10s_weights_and_512_features_at_any_size() -> None:
    """One basic block per stage (64, 128, 256, 512), biasless convolutions, GroupNorm scale
    and bias: the weight count written out by hand."""
    convs = 7 * 7 * 3 * 64 + 2 * 9 * 64 * 64  # the stem, stage 0 (no projection)
    for c_in, c in ((64, 128), (128, 256), (256, 512)):
        convs += 9 * c_in * c + 9 * c * c + c_in * c  # two 3x3 and the 1x1 projection
    norms = 2 * (64 + 2 * 64 + 3 * 128 + 3 * 256 + 3 * 512)
    params = template()
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == convs + norms == 4_905_792
    net = ResNet10()
    for size in (32, 128):
        out = net.apply({"params": params}, jnp.zeros((2, size, size, 3), jnp.uint8))
        assert out.shape == (2, 512)


def test_serl_params_convert_by_name_and_a_wrong_tree_is_named() -> None:
    params = jax.tree_util.tree_map(np.asarray, template(32))
    theirs = serl_tree(params)
    assert "conv_init" in theirs and "Conv_0" in theirs["ResNetBlock_1"]
    for given in (theirs, {"params": theirs}, params):  # also wrapped once, or ours already
        got = params_from_serl(given)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(params),
                        strict=True):  # fmt: skip
            np.testing.assert_array_equal(a, b)
    broken = serl_tree(params)
    del broken["ResNetBlock_2"]["conv_proj"]
    with pytest.raises(ValueError, match=r"params/stage2: missing \['proj_conv'\]"):
        params_from_serl(broken)
    wrong = serl_tree(params)
    wrong["conv_init"]["kernel"] = np.zeros((3, 3, 3, 64), np.float32)
    with pytest.raises(ValueError, match=r"stem_conv/kernel: shape \(3, 3, 3, 64\), the net"):
        params_from_serl(wrong)


@pytest.mark.slow
def test_import_resnet10_writes_an_encoder_that_encodes_as_the_network_and_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pickle in SERL's layout (random weights: the published ones cannot be fetched here)
    and the same as an .npz become encoders whose features are the network's own; a run reads
    reach's front camera through one; bad files are one line."""
    from handrail.learners.agents.encoder import ImageEncoder

    params = jax.tree_util.tree_map(
        lambda x: np.asarray(x) + np.float32(0.01), template(32)
    )  # not the init's values
    pkl, npz = tmp_path / "resnet10_params.pkl", tmp_path / "resnet10.npz"
    pkl.write_bytes(pickle.dumps(serl_tree(params)))
    flat = {"/".join(str(p.key) for p in path): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(serl_tree(params))}  # fmt: skip
    np.savez(npz, **flat)
    frames = np.random.default_rng(0).integers(0, 256, (3, 48, 48, 3), dtype=np.uint8)
    direct = ResNet10().apply({"params": params}, jnp.asarray(frames[:, 8:40, 8:40]))
    for source, out in ((pkl, tmp_path / "enc"), (npz, tmp_path / "enc_npz")):
        assert cli.main(["encoder", "import-resnet10", "--params", str(source), "--cameras",
                         "front", "--image-size", "32", "--out", str(out)]) == 0  # fmt: skip
        encoder = ImageEncoder(out)
        assert encoder.arch == "resnet10" and encoder.dim == 512
        got = encoder.features({"front": frames[:, 8:40, 8:40]})
        np.testing.assert_allclose(got, np.asarray(direct), rtol=1e-3, atol=1e-4)  # jit vs not
    capsys.readouterr()
    run = tmp_path / "run"
    assert cli.main(["train", "--task", "reach", "--encoder", str(tmp_path / "enc"),
                     "--ignore-obs-keys", "goal", "goal_from_tcp_dm", "--steps", "60",
                     "--eval-every", "60", "--eval-episodes", "1", "--no-progress",
                     "--loop.warmup-steps", "40", "--sac.hidden-dims", "32", "32",
                     "--sac.batch-size", "32", "--run-dir", str(run)]) == 0  # fmt: skip
    assert (run / "encoder" / "encoder.json").is_file()
    capsys.readouterr()

    (tmp_path / "junk.pkl").write_bytes(b"not a pickle")
    base = ["encoder", "import-resnet10", "--cameras", "front", "--out", str(tmp_path / "bad")]
    for params_file, expected in (
        (tmp_path / "junk.pkl", "cannot read it as ResNet-10 params"),
        (tmp_path / "none.pkl", "no such file"),
    ):
        assert cli.main([*base, "--params", str(params_file)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "bad").exists()
    assert cli.main([*base[:-2], "--params", str(pkl), "--out", str(tmp_path / "enc")]) == 2
    assert "add --overwrite" in capsys.readouterr().err
