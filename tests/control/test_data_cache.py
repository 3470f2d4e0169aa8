"""This host's dataset cache under `runwright gc` (issue 27: node-cache entries past their
retention): an entry a live run reads is kept whatever its age, a withdrawn dataset's goes at
once, one unused for longer than the retention goes, a recent one stays, a dead fill's partial
file goes, a folder not named like a dataset is never touched; a dry run removes nothing and a
second sweep finds nothing more to remove."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.control.data_cache import sweep_data_cache
from runwright.data.policy import Standing, UsePolicy
from runwright.store import Store
from runwright.store.audit import NewAudit

DAY = 86400.0


def entry(cache: Path, dataset_id: str, age_days: float) -> Path:
    folder = cache / dataset_id
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / "shard-00000.bin").write_bytes(b"x" * 1000)
    old = time.time() - age_days * DAY
    for path in (*folder.iterdir(), folder):
        os.utime(path, (old, old))
    return folder


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_gc_sweeps_the_hosts_dataset_cache_by_use_standing_and_age(tmp_path):
    store = Store.open(tmp_path)
    live_id, read_id, withdrawn_id, recent_id, old_id = (c * 64 for c in "abcde")
    common = dict(spec_hash="0" * 64, plan={}, workdir=str(tmp_path), root=str(tmp_path))
    store.create_run(run_id="queued-1", name="q", state="QUEUED",
                     spec={"data": {"manifest_id": live_id}}, **common)  # fmt: skip
    store.create_run(run_id="ended-1", name="e", state="SUCCEEDED", spec={}, **common)
    store.inputs.record("ended-1", read_id, None, 1)
    store.policies.append(
        withdrawn_id, expected_version=0, standing=Standing.WITHDRAWN, policy=UsePolicy(),
        reason="consent revoked", changed_by="ana",
        audit=NewAudit(actor="ana", via="cli", project=None, action="dataset.withdraw"),
    )  # fmt: skip
    cache = tmp_path / "cache"
    entry(cache, live_id, 30)  # old, but a queued run will read it
    entry(cache, read_id, 30)  # its folder is old; the run that read it ended just now
    withdrawn = entry(cache, withdrawn_id, 0)
    recent = entry(cache, recent_id, 1)
    old = entry(cache, old_id, 10)
    partial = recent / f".shard-00001.bin.partial-{dead_pid()}"
    partial.write_bytes(b"half")
    stranger = cache / "not-a-dataset"
    stranger.mkdir()
    os.utime(stranger, (0, 0))

    def gc(*extra: str) -> dict:
        args = ["gc", "--root", str(tmp_path), "--data-cache", str(cache), "--json", *extra]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["data_cache"]

    dry = gc("--dry-run", "--retention-days", "7")
    verdicts = {Path(e["path"]).name[:8]: e["verdict"] for e in dry["entries"]}
    assert verdicts == {
        "a" * 8: "kept", "b" * 8: "kept", "c" * 8: "would remove", "d" * 8: "kept",
        ".shard-0": "would remove", "e" * 8: "would remove",
    }  # fmt: skip
    assert withdrawn.exists() and old.exists() and partial.exists()  # a dry run

    swept = gc("--retention-days", "7")
    because = {
        e["dataset_id"][:1]: e["because"] for e in swept["entries"] if e["verdict"] == "kept"
    }
    assert because["a"] == "read by run queued-1, not yet ended"
    assert "within the 7-day retention" in because["b"] and "within" in because["d"]
    assert not withdrawn.exists() and not old.exists() and not partial.exists()
    assert recent.exists() and (cache / live_id).exists() and (cache / read_id).exists()
    assert stranger.exists()  # not runwright's
    again = sweep_data_cache(store, cache, retention=7)
    assert [e.verdict for e in again.entries] == ["kept"] * 3
    # A shorter retention takes what is older than it (the day-old entry: removing its partial
    # file did not make it look used), never what a live run reads or one that just ended read.
    short = sweep_data_cache(store, cache, retention=0.5)
    assert [e.dataset_id for e in short.removed] == [recent_id]
    assert (cache / live_id).exists() and (cache / read_id).exists()
    store.close()


def test_a_retention_that_is_not_a_number_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNWRIGHT_DATA_CACHE_RETENTION_DAYS", "a week")
    result = CliRunner().invoke(
        app, ["gc", "--root", str(tmp_path), "--data-cache", str(tmp_path / "cache")]
    )
    assert result.exit_code == 2 and "RUNWRIGHT_DATA_CACHE_RETENTION_DAYS" in result.output
    assert "Traceback" not in result.output
