"""The scheduler benchmark's arithmetic, and a small simulation run end to end (about a second)."""

import argparse
import importlib.util
import math
import random
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
spec = importlib.util.spec_from_file_location("scheduler_bench", BENCHMARKS / "scheduler.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_one_winner() -> None:
    assert bench.jain([0.5, 0.5, 0.5]) == 1.0
    assert math.isclose(bench.jain([1.0, 0.0, 0.0, 0.0]), 0.25)


def test_a_small_simulation_keeps_its_books() -> None:
    args = argparse.Namespace(
        days=0.1, pass_seconds=300.0, node_mtbf_days=2.0, repair_hours=1.0, load=0.9, seed=1
    )
    inventory = bench.build_inventory(24, 2)  # 192 devices
    rng = random.Random(1)
    rate = args.load * 192 / bench.mean_device_seconds()
    arrivals, at = [], 0.0
    while (at := at + rng.expovariate(rate)) < args.days * 24 * bench.HOUR:
        job = bench.draw_job(rng, len(arrivals), at)
        job.devices = min(job.devices, 64)  # the 24-node inventory holds at most 192
        job.per_node = 8 if job.devices >= 8 else None
        arrivals.append(job)
    failures = bench.node_failures(args, inventory, rng)
    for policy in bench.POLICIES:
        jobs = [bench.Job(**job.__dict__) for job in arrivals]
        report = bench.simulate(args, policy, inventory, jobs, failures)
        assert 0.0 < report["utilisation"] <= 1.0
        assert report["goodput"] <= report["utilisation"]
        assert 0.0 <= report["fragmentation"] <= 1.0
        started = sum(v["started"] + v["still_waiting"] for v in report["wait_minutes"].values())
        assert started == len(arrivals)
        assert math.isclose(sum(p["used_share"] for p in report["projects"].values()), 1.0)
