"""The job spec: immutable records, canonical form and hash, and the derived plan.

`spec/` imports nothing of runwright's except the leaf `runwright.errors`.
"""

from runwright.spec.canonical import canonical_json, sha256_hex
from runwright.spec.guards import LossSpikeSpec
from runwright.spec.integrity import IntegritySpec
from runwright.spec.job import SPEC_VERSION, JobSpec
from runwright.spec.loader import load_spec, parse_text, spec_from_mapping
from runwright.spec.observability import (
    MLflowSpec,
    ObservabilitySpec,
    TensorBoardSpec,
    TrackersSpec,
)
from runwright.spec.placement import MembershipSpec, ParallelismSpec, ResourcesSpec
from runwright.spec.policies import (
    BudgetSpec,
    CheckpointIntervalSpec,
    CheckpointSpec,
    ClassPolicy,
    FailureClass,
    GovernanceSpec,
    RecoverySpec,
    ReproducibilitySpec,
)
from runwright.spec.resolve import Derived, ResolvedPlan, resolve_plan
from runwright.spec.workload import (
    CodeSpec,
    DataSpec,
    EnvironmentSpec,
    MixtureSource,
    MixtureSpec,
    MixtureStage,
    ModelSpec,
    OptimizerSpec,
    ScheduleSpec,
    SourceGrowthSpec,
    TokenizerSpec,
    TrainingSpec,
)

__all__ = [
    "SPEC_VERSION",
    "BudgetSpec",
    "CheckpointIntervalSpec",
    "CheckpointSpec",
    "ClassPolicy",
    "CodeSpec",
    "DataSpec",
    "Derived",
    "EnvironmentSpec",
    "FailureClass",
    "GovernanceSpec",
    "IntegritySpec",
    "JobSpec",
    "LossSpikeSpec",
    "MLflowSpec",
    "MembershipSpec",
    "MixtureSource",
    "MixtureSpec",
    "MixtureStage",
    "ModelSpec",
    "ObservabilitySpec",
    "OptimizerSpec",
    "ParallelismSpec",
    "RecoverySpec",
    "ReproducibilitySpec",
    "ResolvedPlan",
    "ResourcesSpec",
    "ScheduleSpec",
    "SourceGrowthSpec",
    "TensorBoardSpec",
    "TokenizerSpec",
    "TrackersSpec",
    "TrainingSpec",
    "canonical_json",
    "load_spec",
    "parse_text",
    "resolve_plan",
    "sha256_hex",
    "spec_from_mapping",
]
