"""What the fleet simulation (`runwright plan fleet`) is given: one synchronous run on N devices,
the classes of failure that interrupt it (each with a rate per device-hour, a detection time, a
restart time, and whether it takes a node away), how it saves (the blocking stall, the persist
time, sync or async, the interval policy), how it restores, and the spare nodes that replace
lost ones. `fleet_engine` walks one run through time; `fleet_sim` repeats it over seeds.

Units: seconds for every duration, except the per-device-hour rates (the unit published failure
studies use) and `days`, the simulated wall window.
"""

import math
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from runwright.plan.base import Record

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86_400.0
MAX_DEVICES = 10_000_000
MAX_DAYS = 36_500.0
"""A hundred years: long windows serve `plan interval --simulate` at a long MTBF."""


class FailureClass(Record):
    """One kind of interruption and what recovering from it costs."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    """Short lower-case name (`gpu`, `network`, `software`)."""
    rate_per_device_hour: float = Field(ge=0)
    """Interruptions per device per hour; the job sees devices x this rate."""
    detect_seconds: float = Field(default=0.0, ge=0)
    """From the failure to the controller knowing the group is dead (watchdog, health check)."""
    restart_seconds: float = Field(default=0.0, ge=0)
    """Requeue, allocation and process start of the new generation (before the restore)."""
    needs_spare: bool = False
    """A node is lost: the restart needs a replacement from the spare pool (node loss)."""
    planned: bool = False
    """Planned maintenance: the run is drained with a full save first, so no work is lost."""


class SavePolicy(StrEnum):
    """How the save interval is chosen."""

    FIXED = "fixed"
    """A declared interval (`interval_seconds`)."""
    YOUNG = "young"
    """Young 1974, sqrt(2 C M), from the blocking cost C and the classes' unplanned rate M."""
    DALY = "daly"
    """Daly 2006's higher-order optimum from the same C and M."""
    ADAPTIVE = "adaptive"
    """Measured-adaptive: at every restart, M is re-estimated from the failures seen so far
    (with the prior as one pseudo-observation) and Daly's interval re-derived."""


class SaveSpec(Record):
    """A checkpoint: what it blocks, when it is durable, and how often."""

    stall_seconds: float = Field(ge=0)
    """Staging: the part of a save that always blocks training (device-to-host copy)."""
    persist_seconds: float = Field(default=0.0, ge=0)
    """Writing the staged copy to storage until it is committed."""
    mode: Literal["sync", "async"] = "sync"
    """`sync` blocks for stall + persist; `async` blocks for the stall only and is durable
    persist seconds later (a failure before then falls back to the previous save)."""
    bytes: float = Field(default=0.0, ge=0)
    """Bytes one save writes to storage."""
    restore_seconds: float = Field(default=0.0, ge=0)
    """Loading and verifying the newest durable save after a restart."""
    policy: SavePolicy = SavePolicy.DALY
    """How the interval is chosen."""
    interval_seconds: float | None = Field(default=None, gt=0)
    """Training seconds between two saves, for policy `fixed`."""
    prior_mtbf_seconds: float | None = Field(default=None, gt=0)
    """Policy `adaptive`: the MTBF assumed before any failure is seen; default the classes'."""

    @property
    def blocking_seconds(self) -> float:
        """C: what one save blocks training for (without waiting on a full async backlog)."""
        return self.stall_seconds + (self.persist_seconds if self.mode == "sync" else 0.0)

    @property
    def lag_seconds(self) -> float:
        """How long after its stall ends a save becomes durable: persist for async, 0 for sync."""
        return self.persist_seconds if self.mode == "async" else 0.0

    @model_validator(mode="after")
    def _policy_inputs(self) -> "SaveSpec":
        if self.policy == SavePolicy.FIXED and self.interval_seconds is None:
            raise ValueError("policy fixed needs interval_seconds (training seconds per save)")
        if self.policy != SavePolicy.FIXED and self.blocking_seconds <= 0:
            raise ValueError(
                f"policy {self.policy.value} derives the interval from the blocking cost of a "
                "save, which is zero here: give a positive stall (or a fixed interval)"
            )
        return self


class SpareSpec(Record):
    """Replacement nodes for node-loss failures."""

    nodes: int | None = Field(default=None, ge=0)
    """Spare nodes held for the run; None: a replacement is always at hand."""
    repair_seconds: float = Field(default=3 * SECONDS_PER_DAY, gt=0)
    """Mean time (exponential) until a lost node is repaired and back in the spare pool."""


class FleetInputs(Record):
    """Everything one simulated run depends on, apart from the seed."""

    devices: int = Field(gt=0, le=MAX_DEVICES)
    """N: devices in the synchronous group (all fail together: any failure stops the run)."""
    devices_per_node: int = Field(default=8, gt=0)
    """Devices on one node: a node loss takes this many and a spare node brings them back."""
    days: float = Field(gt=0, le=MAX_DAYS)
    """The simulated wall-clock window."""
    classes: list[FailureClass] = Field(min_length=1)
    """The kinds of interruption, each with its own per-device rate and recovery costs."""
    save: SaveSpec
    """Checkpoint cost, mode and interval policy."""
    spares: SpareSpec = SpareSpec()
    """The spare-node pool."""
    step_seconds: float | None = Field(default=None, gt=0)
    """Optimizer step time, to express lost work in steps."""

    @model_validator(mode="after")
    def _distinct_classes(self) -> "FleetInputs":
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"failure class names must be distinct: {names}")
        if self.save.policy != SavePolicy.FIXED and self.unplanned_rate_per_second <= 0:
            raise ValueError(
                f"policy {self.save.policy.value} needs a positive unplanned failure rate to "
                "derive the interval from; give a fixed interval instead"
            )
        return self

    @property
    def wall_seconds(self) -> float:
        return self.days * SECONDS_PER_DAY

    @property
    def nodes(self) -> int:
        return math.ceil(self.devices / self.devices_per_node)

    @property
    def rate_per_second(self) -> float:
        """Lambda: the job's interruption rate, every class (the superposed Poisson process)."""
        return self.devices * sum(c.rate_per_device_hour for c in self.classes) / SECONDS_PER_HOUR

    @property
    def unplanned_rate_per_second(self) -> float:
        """The rate of the interruptions that lose work (planned ones drain first)."""
        rate = sum(c.rate_per_device_hour for c in self.classes if not c.planned)
        return self.devices * rate / SECONDS_PER_HOUR

    @property
    def job_mtbf_seconds(self) -> float:
        """M: mean time between unplanned interruptions of the whole job, 1 / (N sum r)."""
        rate = self.unplanned_rate_per_second
        return math.inf if rate == 0 else 1.0 / rate


class Spread(Record):
    """One figure over the seeds: mean, sample standard deviation, and range."""

    mean: float
    std: float
    """Sample standard deviation across seeds (0 for one seed)."""
    min: float
    max: float


class LostPerFailure(Record):
    """Work lost by each failure that stopped training, over every seed."""

    count: int
    """Failures that stopped training (failures during a recovery lose no further work)."""
    mean_seconds: float
    p50_seconds: float
    p90_seconds: float
    p99_seconds: float
    max_seconds: float


class AnalyticCheck(Record):
    """The first-order model at the same inputs, beside the simulation."""

    job_mtbf_seconds: float
    """M = 1 / (N sum r) over the unplanned classes."""
    expected_interruptions: float
    """Lambda x wall window, every class."""
    young_seconds: float
    """sqrt(2 C M) with C the blocking cost of a save."""
    daly_seconds: float
    """Daly 2006's optimum at the same C and M."""
    mean_recovery_seconds: float
    """Rate-weighted mean of detect + restart over the unplanned classes, plus the restore."""
    first_order_ettr: float
    """1 - W(T), W(T) = C/T + T/(2M) + (R + D)/M (seed 003, after Young) at the simulated
    mean interval; spare waits and async persist lag are outside it."""


class FleetReport(Record):
    """The simulated run over several seeds: ETTR, goodput, interruptions, lost work, saves."""

    inputs: FleetInputs
    seeds: list[int]
    """The seeds simulated; each is one independent run of the same window."""
    interval_seconds: Spread
    """Training seconds between saves (time-weighted mean per run for policy adaptive)."""
    ettr: Spread
    """Effective training time ratio: productive seconds / wall seconds (Kokolis et al. 2024)."""
    goodput_fraction: Spread
    """Productive device-hours over every device-hour held, spare nodes included."""
    productive_device_hours: Spread
    """Device-hours of training that was kept: the run's goodput."""
    interruptions: Spread
    """Every interruption in the window, planned ones and ones during a recovery included."""
    unplanned_interruptions: Spread
    interruptions_by_class: dict[str, float]
    """Mean interruptions per class."""
    mttf_hours: Spread
    """Wall window / unplanned interruptions: the job's measured mean time to failure."""
    lost_seconds: Spread
    """Training seconds lost per run (redone after restores)."""
    lost_steps: Spread | None
    """lost_seconds / step_seconds; None without a step time."""
    lost_per_failure: LostPerFailure
    checkpoints: Spread
    """Saves committed (durable) per run."""
    abandoned_saves: Spread
    """Saves a failure cut short before they were durable."""
    bytes_written: Spread
    """Checkpoint bytes written to storage per run, cut-short saves in proportion."""
    spare_wait_seconds: Spread
    """Wall seconds a restart waited for a replacement node."""
    wall_breakdown_seconds: dict[str, float]
    """Mean wall seconds per use: productive, checkpoint, lost, detect, spare_wait, restart,
    restore. They sum to the window."""
    analytic: AnalyticCheck | None
    """None when no class loses work (no unplanned rate to model)."""
    assumptions: str
