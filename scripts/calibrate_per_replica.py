"""Seed calibration of the per-replica bounds of
``tests/test_distributed.py::test_two_workers_match_one_process_at_the_same_global_batch``:
for each seed, 2 TensorFlow workers (per-replica BatchNorm) against one
process at the same global batch (the test's run, about 25 s a seed here);
prints, one JSON line a seed, the three quantities the test bounds.

    python scripts/calibrate_per_replica.py 0,1,2,3
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_distributed as td  # noqa: E402

rows = []
for seed in [int(s) for s in sys.argv[1].split(",")]:
    tmp = Path(tempfile.mkdtemp(prefix=f"calib{seed}-"))
    _, (chief, _) = td.check_workers(tmp / "w", 2, {"seed": seed})
    mine = td.report(chief)["history"]
    theirs = td.single_process(tmp / "one", seed=seed).history
    loss = max(abs(m["loss"] - t["loss"]) / t["loss"] for m, t in zip(mine, theirs))
    acc = max(abs(m["test_accuracy"] - t["test_accuracy"]) for m, t in zip(mine, theirs))
    gap = sum(m["test_accuracy"] - t["test_accuracy"] for m, t in zip(mine, theirs)) / len(mine)
    row = dict(seed=seed, max_loss_rel=round(loss, 4), max_epoch_acc=round(acc, 4),
               mean_gap=round(gap, 4))
    rows.append(row)
    print(json.dumps(row), flush=True)
