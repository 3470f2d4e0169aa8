"""What the controller's replay check (control/replay_check.py, issue 16) costs per step report.

The controller fingerprints every rank's STEP_HEALTHY as it ingests it and, in a restarted
generation, compares each report with the failed generation's. Measured in-process on the
`RunReplays` the controller keeps per run: a first generation of `--ranks` x `--steps` reports
(fingerprint and keep), then a second generation replaying the last half (fingerprint, keep and
compare), each timed over all its reports, median of `--rounds` rounds. Checkpoints commit every
`--every` steps, so the memory bound (two commits) prunes as it would in a run. Writes
benchmarks/results/replay_check.json.

    .venv/bin/python benchmarks/replay_check.py [--ranks 64] [--steps 400] [--rounds 5]
"""

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from runwright.control.replay_check import RunReplays
from runwright.events import EventType
from runwright.protocol import ChannelMessage

RESULTS = Path(__file__).resolve().parent / "results" / "replay_check.json"


def reports(generation: int, ranks: int, steps: range, every: int) -> list[ChannelMessage]:
    made = []
    for step in steps:
        for rank in range(ranks):
            made.append(
                ChannelMessage(
                    event_id=f"g{generation}-r{rank}-s{step}",
                    type=EventType.STEP_HEALTHY,
                    generation=generation,
                    rank=rank,
                    step=step,
                    world_size=ranks,
                    time_unix_s=0.0,
                    attributes={
                        "loss": 1.0 / (step + 1) + rank,
                        "samples": [step * 8, step * 8 + 8],
                    },
                )
            )
        if step % every == 0:
            made.append(
                ChannelMessage(
                    event_id=f"g{generation}-commit-{step}",
                    type=EventType.CHECKPOINT_COMMITTED,
                    generation=generation,
                    rank=0,
                    step=step,
                    time_unix_s=0.0,
                )
            )
    return made


def one_round(ranks: int, steps: int, every: int) -> tuple[float, float, str]:
    replays = RunReplays(ranks)
    first = reports(1, ranks, range(1, steps + 1), every)
    restored = steps - every  # the newest commit before the last one: a replay of `every` steps
    second = reports(2, ranks, range(restored + 1, steps + 1), every)
    began = time.perf_counter()
    for message in first:
        replays.observe(message)
    first_us = (time.perf_counter() - began) / len(first) * 1e6
    began = time.perf_counter()
    for message in second:
        replays.observe(message)
    second_us = (time.perf_counter() - began) / len(second) * 1e6
    ((_, verdict, _),) = replays.verdicts(ended=True)
    return first_us, second_us, str(verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = [one_round(args.ranks, args.steps, args.every) for _ in range(args.rounds)]
    result = {
        "benchmark": "replay_check",
        "machine": platform.platform(),
        "ranks": args.ranks,
        "steps": args.steps,
        "every": args.every,
        "rounds": args.rounds,
        "first_generation_us_per_report": round(statistics.median(r[0] for r in rounds), 2),
        "replay_us_per_report": round(statistics.median(r[1] for r in rounds), 2),
        "verdict": rounds[0][2],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
