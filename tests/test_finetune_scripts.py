"""The fine-tuning scripts: ``finetune_select.py`` chooses finetune()'s
settings on a validation split that holds no shot and no test image, and
``finetune_example.py --rebuild`` retrains a recorded net to the same error
and the same weights, bit for bit."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import run_script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "finetune"))

from finetune_example import CLASSES, Data  # noqa: E402
from finetune_select import validation_split  # noqa: E402


class FakeData(Data):
    """Ten classes of 30 "images" each: image i is the number i."""

    def __init__(self):
        super().__init__(None)
        labels = np.repeat(np.arange(CLASSES), 30)
        self.splits["x", "train"] = (np.arange(len(labels), dtype="float32"), labels)


@pytest.mark.parametrize("shots,seed", [(1, 0), (10, 100), (20, 7)])
def test_validation_images_are_training_images_that_are_not_shots(shots, seed):
    sets = FakeData()
    x, y = sets.shots("x", shots, seed)
    val_x, val_y = validation_split(sets, "x", shots, seed, per_class=10)
    assert len(val_x) == 10 * CLASSES and np.bincount(val_y).tolist() == [10] * CLASSES
    assert not set(val_x.tolist()) & set(x.tolist())  # no shot is a validation image
    assert len(set(val_x.tolist())) == len(val_x)
    # seeded: the same split again, another seed another split
    again = validation_split(sets, "x", shots, seed, per_class=10)[0]
    assert np.array_equal(again, val_x)
    assert not np.array_equal(validation_split(sets, "x", shots, seed + 1, per_class=10)[0],
                              val_x)


@pytest.mark.integration  # real MNIST-family data, published weights, trains
def test_select_writes_the_choice_and_rebuild_retrains_the_same_net(tmp_path):
    proc = run_script("scripts/finetune/finetune_select.py", "--depths", "2", "--shots", "10",
                      "--seeds", "100", "--val", "20", "--grid", "full_lr=0.02,0.005", "--out",
                      str(tmp_path / "select"), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (tmp_path / "select" / "table-full_lr.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| `{")]
    assert len(rows) == 2 and sum("(chosen)" in r for r in rows) == 1
    assert "no test image read" in table
    results = json.loads((tmp_path / "select" / "results.json").read_text())
    assert len(results) == 4  # 2 rates x 2 directions
    assert all(0 <= e <= 1 for e in results.values())

    out = tmp_path / "table"
    cell = ["scripts/finetune/finetune_example.py", "--depths", "2", "--shots", "10", "--seeds",
            "0", "--methods", "new", "--directions", "fashion_mnist_to_mnist", "--out", str(out)]
    assert run_script(*cell, timeout=900).returncode == 0
    recorded = json.loads((out / "results.json").read_text())
    (entry,) = recorded.values()
    assert len(entry["weights_sha256"]) == 64 and 0 < entry["error"] < 1
    proc = run_script(*cell, "--rebuild", "--save-nets", str(tmp_path / "nets"), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 of 1 nets rebuilt exactly" in proc.stdout
    assert json.loads((out / "results.json").read_text()) == recorded  # unchanged
    assert (tmp_path / "nets" / "gresnet_mlp2_fashion_mnist_to_mnist_10shots_seed0_new.keras"
            ).stat().st_size > 10_000
    # a recorded net that is not what the code trains is told apart (exit 1)
    (key,) = recorded
    (out / "results.json").write_text(json.dumps({key: dict(entry, error=entry["error"] + 1e-4)}))
    proc = run_script(*cell, "--rebuild", timeout=900)
    assert proc.returncode == 1 and "DIFFERS" in proc.stdout
