"""Capacity planning: pure functions for memory, communication, checkpoint interval, parallel
layout and scaling efficiency, each citing the paper its formula comes from.

The fleet simulation (`fleet_model`, `fleet_engine`, `fleet_sim`, `fleet_sweep`,
`fleet_presets`) is imported from its modules, not re-exported here: importing it costs 30-80 ms
(its records and presets are built on import), and `ckpt/` imports this package in every
training process.

Nothing here performs I/O; `runwright.cli.plan` parses flags or a spec, calls one function and
renders the record it returns.
"""

from runwright.plan.activations import (
    Recompute,
    activation_bytes_per_device,
    activation_bytes_per_layer,
)
from runwright.plan.comm import (
    Collective,
    CollectiveCost,
    Link,
    collective_cost,
    collective_table,
    pipeline_boundary_cost,
)
from runwright.plan.errors import PlanError
from runwright.plan.interval import (
    IntervalPlan,
    IntervalRow,
    daly_interval_seconds,
    daly_waste_fraction,
    expected_waste_fraction,
    pause_share,
    plan_interval,
    young_interval_seconds,
)
from runwright.plan.memory import (
    MIXED_PRECISION_ADAM,
    MemoryLedger,
    ModelStateBytes,
    Offload,
    StateBytes,
    ZeroStage,
    memory_ledger,
    model_state_bytes,
)
from runwright.plan.model import model_flops_per_token, parameters_per_device
from runwright.plan.parallel import (
    Cluster,
    Layout,
    LayoutEstimate,
    ParallelSearch,
    Rejection,
    Workload,
    search_layouts,
)
from runwright.plan.scaling import ScalingPoint, ScalingReport, scaling_efficiency

__all__ = [
    "MIXED_PRECISION_ADAM",
    "Cluster",
    "Collective",
    "CollectiveCost",
    "IntervalPlan",
    "IntervalRow",
    "Layout",
    "LayoutEstimate",
    "Link",
    "MemoryLedger",
    "ModelStateBytes",
    "Offload",
    "ParallelSearch",
    "PlanError",
    "Recompute",
    "Rejection",
    "ScalingPoint",
    "ScalingReport",
    "StateBytes",
    "Workload",
    "ZeroStage",
    "activation_bytes_per_device",
    "activation_bytes_per_layer",
    "collective_cost",
    "collective_table",
    "daly_interval_seconds",
    "daly_waste_fraction",
    "expected_waste_fraction",
    "memory_ledger",
    "model_flops_per_token",
    "model_state_bytes",
    "parameters_per_device",
    "pause_share",
    "pipeline_boundary_cost",
    "plan_interval",
    "scaling_efficiency",
    "search_layouts",
    "young_interval_seconds",
]
