"""Real torchrun ranks (gloo, CPU) stop and resume from the cursor under 2, 1 and 4 ranks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runwright.data import ConsumptionLedger, DataLoader, gaps_and_overlaps, join
from runwright.spec import DataSpec

from .conftest import make_dataset
from .torchrun_reader import GLOBAL_BATCH, SPEC

WORKER = Path(__file__).with_name("torchrun_reader.py")


def torchrun(ranks: int, dataset: Path, steps: int, out: Path, state: Path | None) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(ranks),
        "--standalone",
        str(WORKER),
        str(dataset),
        str(steps),
        str(out),
    ]
    if state is not None:
        cmd.append(str(state))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.integration
def test_resume_across_world_sizes_equals_an_uninterrupted_read(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    make_dataset(dataset, {"code": 150, "prose": 80})
    with DataLoader(
        dataset, DataSpec.model_validate(SPEC), global_batch_samples=GLOBAL_BATCH
    ) as loader:
        reference = [b.tokens.tolist() for _, b in zip(range(12), loader, strict=False)]

    rows, ledgers, state = [], [], None
    for phase, ranks in enumerate((2, 1, 4)):
        result = torchrun(ranks, dataset, 4, tmp_path / f"out{phase}.json", state)
        rows += result["rows"]
        ledgers.append(ConsumptionLedger.model_validate(result["ledger"]))
        state = tmp_path / f"cursor{phase}.json"
        state.write_text(json.dumps(result["cursor"]))
        assert result["cursor"]["step"] == 4 * (phase + 1)

    assert rows == reference
    ledger = join(*ledgers)
    assert gaps_and_overlaps(ledger) == []
    assert [(r.first_sample, r.end_sample) for r in ledger.ranges] == [(0, 12 * GLOBAL_BATCH)]
