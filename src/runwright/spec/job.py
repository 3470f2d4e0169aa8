"""JobSpec: the immutable, hashed description of a run (ARCHITECTURE.md, "Core records")."""

from functools import cached_property

from pydantic import Field, model_validator

from runwright.spec.base import Section
from runwright.spec.canonical import canonical_json, sha256_hex
from runwright.spec.elastic import check_elastic_range
from runwright.spec.observability import ObservabilitySpec
from runwright.spec.parallel import layout_problems
from runwright.spec.placement import ParallelismSpec, ResourcesSpec
from runwright.spec.policies import (
    BudgetSpec,
    CheckpointSpec,
    GovernanceSpec,
    RecoverySpec,
    ReproducibilitySpec,
)
from runwright.spec.resolve import ResolvedPlan, resolve_plan
from runwright.spec.usage import UsageSpec
from runwright.spec.workload import (
    CodeSpec,
    DataSpec,
    EnvironmentSpec,
    ModelSpec,
    TokenizerSpec,
    TrainingSpec,
)

SPEC_VERSION = 1


class JobSpec(Section):
    """Everything that defines a run. A spec never changes; a change is a new spec."""

    version: int = Field(default=SPEC_VERSION, ge=SPEC_VERSION, le=SPEC_VERSION)
    """Spec format version."""
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """Run name: letters, digits, `.`, `_`, `-`."""
    code: CodeSpec
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    model: ModelSpec = Field(default_factory=ModelSpec)
    tokenizer: TokenizerSpec = Field(default_factory=TokenizerSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    recovery: RecoverySpec = Field(default_factory=RecoverySpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    reproducibility: ReproducibilitySpec = Field(default_factory=ReproducibilitySpec)
    governance: GovernanceSpec = Field(default_factory=GovernanceSpec)
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec)
    usage: UsageSpec = Field(default_factory=UsageSpec)
    """Purpose and region the datasets' use policies are checked against."""

    @model_validator(mode="after")
    def _trackers_finish_within_the_stop_grace(self) -> "JobSpec":
        trackers, grace = self.observability.trackers, self.recovery.stop_grace_seconds
        if trackers.switched_on and trackers.finish_seconds >= grace:
            raise ValueError(
                f"observability.trackers.finish_seconds={trackers.finish_seconds:g} must be below "
                f"recovery.stop_grace_seconds={grace:g}, or a stopping run waiting for a dead "
                f"tracker is killed before it exits; e.g. finish_seconds: {grace / 2:g}"
            )
        return self

    @model_validator(mode="after")
    def _budget_shares_name_a_limit(self) -> "JobSpec":
        for i, criterion in enumerate(self.governance.stop_criteria):
            if getattr(criterion, "metric", None) == "eval_loss" and (
                self.training.eval_every_steps is None
            ):
                raise ValueError(
                    f"governance.stop_criteria[{i}] reads eval_loss, but the run never "
                    "evaluates: set training.eval_every_steps"
                )
            of = getattr(criterion, "of", None)
            if of is not None and getattr(self.budget, of) is None:
                raise ValueError(
                    f"governance.stop_criteria[{i}] stops at a share of budget.{of}, which is "
                    f"not set: set budget.{of}, or choose another `of`"
                )
        return self

    @model_validator(mode="after")
    def _resolvable(self) -> "JobSpec":
        # Resolving checks every cross-section contradiction (dp vs world size, batch divisibility)
        # and raises a ValueError that names the fields and the nearest valid values.
        resolve_plan(self)
        problems = layout_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        check_elastic_range(self)
        return self

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    @cached_property
    def spec_hash(self) -> str:
        """sha256 of the canonical JSON: stable across key order, whitespace, and equivalent
        spellings of a number."""
        return sha256_hex(self.canonical_json())

    @cached_property
    def plan(self) -> ResolvedPlan:
        return resolve_plan(self)
