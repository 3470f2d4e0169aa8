"""Named fleets for `runwright plan fleet --preset`, each built from a published failure study.
The failure rates come from the source; what the source does not give (detection, restart,
restore and save times) is an assumption, named in the preset's `assumed` text and overridable
by flags. docs/fleet.md compares what the simulator gives with these inputs to the published
figures.

llama3-16k   Dubey et al. 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783), sec. 3.3.4 and
             Table 5: a 54-day snapshot of pre-training on 16,384 H100 GPUs (8 per server) had
             466 job interruptions, 47 planned and 419 unexpected, each unexpected one
             attributed to a root cause. A class's rate is its count over the snapshot's
             device-hours: count / (16,384 x 54 x 24) = count / 21,233,664 per device-hour.
kokolis-rsc1 Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine Learning
             Research Clusters" (arXiv 2410.21680, HPCA 2025): RSC-1 (A100, 8 per node) saw
             6.50 node failures per 1,000 node-days; per device-hour that is
             6.50e-3 / (8 x 24) = 3.385e-5. Their job-MTTF projection, 1 / (nodes x r_f), gives
             1.8 h at 16,384 GPUs and 0.23 h at 131,072.
"""

from pydantic import Field

from runwright.plan.base import Record
from runwright.plan.errors import PlanError
from runwright.plan.fleet_model import FailureClass


class Preset(Record):
    """A published fleet: its size, window and failure classes."""

    name: str
    source: str
    """The publication the rates come from."""
    devices: int
    devices_per_node: int
    days: float
    classes: list[FailureClass] = Field(min_length=1)
    stall_seconds: float
    """Assumed blocking part of a save (the sources give none)."""
    restore_seconds: float
    """Assumed restore time."""
    assumed: str
    """What the source does not give and the preset assumes."""


LLAMA3_DEVICE_HOURS = 16_384 * 54 * 24
"""The Llama 3 snapshot's device-hours: 16,384 GPUs x 54 days x 24 h = 21,233,664."""


def _llama3(name: str, count: int, detect: float, restart: float, **flags: bool) -> FailureClass:
    return FailureClass(
        name=name,
        rate_per_device_hour=count / LLAMA3_DEVICE_HOURS,
        detect_seconds=detect,
        restart_seconds=restart,
        **flags,
    )


# Table 5's 18 root causes, grouped by what recovering from them takes. Hardware that takes a node
# out (GPU, host, unplanned host maintenance) needs a spare; a switch or cable fault, a software
# bug or an NCCL watchdog timeout restarts on the same nodes.
LLAMA3_16K = Preset(
    name="llama3-16k",
    source="Dubey et al. 2024, The Llama 3 Herd of Models, arXiv 2407.21783, Table 5",
    devices=16_384,
    devices_per_node=8,
    days=54,
    classes=[
        # Faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, SDC 6, thermal/sensor 6.
        _llama3("gpu", 268, detect=120, restart=300, needs_spare=True),
        # NIC 7, SSD 3, power supply 3, chassis 2, IO expansion board 2, CPU 2, memory 2.
        _llama3("host", 21, detect=120, restart=300, needs_spare=True),
        _llama3("host-maintenance", 32, detect=0, restart=300, needs_spare=True),
        _llama3("network", 35, detect=120, restart=300),  # network switch and cable
        # Software bug 54, NCCL watchdog timeouts 7, dependency 2.
        _llama3("software", 63, detect=300, restart=300),
        _llama3("planned", 47, detect=0, restart=300, planned=True),
    ],
    stall_seconds=30.0,
    restore_seconds=120.0,
    assumed=(
        "detection 120 s (hardware, network) and 300 s (software: a watchdog timeout), restart "
        "300 s, restore 120 s, a 30 s synchronous save: the paper gives none of them, only that "
        "job start-up and checkpoint times were cut and effective training time exceeded 90 %"
    ),
)

RSC1_RATE_PER_NODE_DAY = 6.50e-3
"""Kokolis et al. 2024: RSC-1's failures per node-day (6.50 per 1,000 node-days)."""

KOKOLIS_RSC1 = Preset(
    name="kokolis-rsc1",
    source=(
        "Kokolis et al. 2024, Revisiting Reliability in Large-Scale Machine Learning Research "
        "Clusters, arXiv 2410.21680: RSC-1's 6.50 failures per 1,000 node-days"
    ),
    devices=16_384,
    devices_per_node=8,
    days=30,
    classes=[
        FailureClass(
            name="node",
            rate_per_device_hour=RSC1_RATE_PER_NODE_DAY / (8 * 24),
            detect_seconds=150,
            restart_seconds=300,
            needs_spare=True,
        )
    ],
    stall_seconds=30.0,
    restore_seconds=120.0,
    assumed=(
        "every failure a node loss; detection 150 s, restart 300 s, restore 120 s, a 30 s "
        "synchronous save: the rate is the paper's, these costs are not"
    ),
)

PRESETS = {p.name: p for p in (LLAMA3_16K, KOKOLIS_RSC1)}


def preset(name: str) -> Preset:
    """The preset called `name`; PlanError naming the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise PlanError(
            f"--preset {name!r} is not a known fleet; use one of {', '.join(sorted(PRESETS))}"
        ) from None
