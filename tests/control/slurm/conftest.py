"""The session's Slurm cluster (cluster.py). Without Slurm's daemons and clients these tests skip,
unless RUNWRIGHT_REQUIRE_SLURM is set (`.ci/run` sets it), which makes them fail instead."""

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# A plain module beside this file (benchmarks/scale_out.py loads it the same way): the tests run
# with --import-mode=importlib, which puts no test folder on sys.path.
_spec = importlib.util.spec_from_file_location(
    "slurm_test_cluster", Path(__file__).with_name("cluster.py")
)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
SlurmCluster = _module.SlurmCluster
missing_slurm = _module.missing_slurm


def require_slurm() -> None:
    why = missing_slurm()
    if why is None:
        return
    if os.environ.get("RUNWRIGHT_REQUIRE_SLURM"):
        pytest.fail(f"RUNWRIGHT_REQUIRE_SLURM is set but {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    require_slurm()
    cluster = SlurmCluster()
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
    assert not left, f"jobs were left in the Slurm queue at the end: {left}"
