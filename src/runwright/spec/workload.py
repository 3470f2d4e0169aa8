"""What is trained and on what: code, environment, model, tokenizer, data, training."""

import re
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from runwright.spec import limits
from runwright.spec.base import Section
from runwright.spec.guards import LossSpikeSpec
from runwright.spec.integrity import IntegritySpec
from runwright.spec.location import dataset_location
from runwright.spec.resolve import divisors

ALGORITHM_PATTERN = r"^[a-z][a-z0-9-]*-v[0-9]+$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""A POSIX environment variable name; `=` or an empty name cannot be set at launch."""


class CodeSpec(Section):
    """The program a run executes."""

    entrypoint: str = Field(min_length=1)
    """Training script path (relative to the spec file's folder or absolute) or `module:NAME`
    for `python -m NAME`; launched under torchrun on every rank."""
    args: list[str] = Field(default_factory=list)
    """Extra command-line arguments passed to the entrypoint on every rank."""
    ref: str | None = None
    """Code version (a git commit or tag) recorded in the run's evidence chain."""


class EnvironmentSpec(Section):
    """The software environment the run expects."""

    lock_file: str | None = None
    """Path of an environment lock (requirements.txt, uv.lock, ...) whose hash is recorded."""
    lock_hash: str | None = None
    """sha256 of the lock file, when known at submit time."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables set for every worker."""

    @field_validator("env")
    @classmethod
    def _names_are_settable(cls, env: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in env if not re.fullmatch(ENV_NAME_PATTERN, name))
        if bad:
            raise ValueError(
                f"environment variable names {bad} cannot be set: use letters, digits and `_`, "
                "not starting with a digit"
            )
        return env


class ModelSpec(Section):
    """A decoder-only transformer; the reference trainer builds it, the planner sizes it."""

    architecture: Literal["gpt"] = "gpt"
    """Model family; only the reference decoder-only GPT for now."""
    n_layers: PositiveInt = Field(default=2, le=limits.MAX_LAYERS)
    """Number of transformer blocks (L)."""
    d_model: PositiveInt = Field(default=64, le=limits.MAX_WIDTH)
    """Hidden size (H)."""
    n_heads: PositiveInt = Field(default=4, le=limits.MAX_HEADS)
    """Attention heads; must divide d_model."""
    d_ff: PositiveInt | None = Field(default=None, le=limits.MAX_WIDTH)
    """Feed-forward inner size; defaults to 4 x d_model."""
    vocab_size: PositiveInt = Field(default=512, le=limits.MAX_VOCAB)
    """Vocabulary size (V); must cover the tokenizer's ids."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """Dropout probability; 0 keeps runs bitwise reproducible without extra RNG care."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> "ModelSpec":
        if self.d_model % self.n_heads:
            near = sorted(divisors(self.d_model), key=lambda h: abs(h - self.n_heads))[:3]
            raise ValueError(
                f"n_heads={self.n_heads} must divide d_model={self.d_model}; "
                f"nearest valid n_heads: {sorted(near)}"
            )
        return self

    @property
    def ffn_size(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def parameter_count(self) -> int:
        """Parameters of the reference GPT: tied embedding V*H, per block 4H^2 (attention) +
        2*H*F (MLP) + biases and two LayerNorms, plus the final LayerNorm."""
        h, f = self.d_model, self.ffn_size
        per_block = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
        return self.vocab_size * h + self.n_layers * per_block + 2 * h


class TokenizerSpec(Section):
    """The tokenizer whose ids the data and model share."""

    path: str | None = None
    """A HF `tokenizers` tokenizer.json; None means the dataset's own recorded tokenizer."""
    hash: str | None = None
    """Expected sha256 of the tokenizer file; a mismatch refuses the run."""
    eod_token_id: int | None = Field(default=None, ge=0, lt=limits.MAX_VOCAB)
    """End-of-document token id used by packing; None takes it from the dataset manifest."""


class MixtureSource(Section):
    """One source of a data mixture and its target share."""

    name: str = Field(min_length=1)
    """Source name as recorded in the dataset manifest (e.g. `code`, `prose`)."""
    weight: PositiveFloat
    """Relative target weight; weights are normalised to sum to one."""
    exhaustion: Literal["stop", "repeat", "renormalise", "error"] = "repeat"
    """What happens when this source runs out within an epoch."""


class MixtureStage(Section):
    """A later stage of a staged mixture (`staged-quota-v1`): from a global step or a token
    count on, its own sources and weights, e.g. an annealing stage at the end."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    """Stage name, shown in the MIXTURE_STAGE_STARTED event and on the report's charts."""
    start_step: PositiveInt | None = Field(default=None, le=limits.MAX_STEPS)
    """Global steps consumed before the stage begins (its first step is start_step + 1)."""
    start_tokens: PositiveInt | None = Field(default=None, le=limits.MAX_TOKENS)
    """Or: training tokens consumed before it begins, rounded up to a whole global step."""
    sources: list[MixtureSource] = Field(min_length=1)
    """The stage's sources and weights; a source left out is not drawn in this stage."""

    @model_validator(mode="after")
    def _one_start_and_unique_sources(self) -> "MixtureStage":
        if (self.start_step is None) == (self.start_tokens is None):
            raise ValueError(
                f"stage {self.name!r}: give exactly one of start_step or start_tokens "
                f"(got start_step={self.start_step}, start_tokens={self.start_tokens})"
            )
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stage {self.name!r}: source names must be unique; repeated: {dupes}")
        return self


STAGED_MIXTURE = "staged-quota-v1"
"""The mixture algorithm that reads `mixture.stages` (data/read/stages.py)."""


class MixtureSpec(Section):
    """How sources are interleaved into one logical sequence."""

    algorithm: str = Field(default="quota-v1", pattern=ALGORITHM_PATTERN)
    """Versioned mixture algorithm (`quota-v1` exact quotas, `categorical-v1` independent draws)."""
    unit: Literal["documents", "tokens", "loss_tokens"] = "documents"
    """What the weights count."""
    sources: list[MixtureSource] = Field(default_factory=list)
    """Sources with weights; empty means every source in proportion to its size."""
    stages: list[MixtureStage] = Field(default_factory=list)
    """Later stages (algorithm `staged-quota-v1`): `sources` is the first stage, from step 0;
    each stage here replaces the weights from its start on, with exact quotas within it."""

    @model_validator(mode="after")
    def _unique_sources(self) -> "MixtureSpec":
        names = [s.name for s in self.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"mixture source names must be unique; repeated: {dupes}")
        return self

    @model_validator(mode="after")
    def _stages_are_staged(self) -> "MixtureSpec":
        if not self.stages:
            return self
        if self.algorithm != STAGED_MIXTURE:
            raise ValueError(
                f"mixture.stages needs algorithm {STAGED_MIXTURE!r} (got {self.algorithm!r}); "
                f"set mixture.algorithm: {STAGED_MIXTURE}"
            )
        if not self.sources:
            raise ValueError(
                "mixture.stages needs mixture.sources: the first stage's sources and weights"
            )
        names = [s.name for s in self.stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"mixture stage names must be unique; repeated: {dupes}")
        steps = [s.start_step for s in self.stages if s.start_step is not None]
        if steps != sorted(set(steps)):
            raise ValueError(
                f"mixture.stages: start_step values must increase from stage to stage; got {steps}"
            )
        return self


class SourceGrowthSpec(Section):
    """An explicit new version of the dataset's sources during a run (growing sources): a run
    whose data cursor was written for `from_manifest_id` continues on `data.dataset` at the
    cursor's step boundary, mapped by `mapping`, and records the change in the cursor."""

    from_manifest_id: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Dataset id the cursor was written for (the version being replaced); any other is refused."""
    mapping: Literal["new-epoch-v1"] = "new-epoch-v1"
    """How the cursor maps onto the new version: `new-epoch-v1` keeps the step, sample position
    and mixture stage, ends the epoch there (the document a step boundary split is not
    finished) and draws the next epoch from the new version's permutations."""


class DataSpec(Section):
    """The data contract: which dataset, in which order, packed how."""

    dataset: str | None = None
    """Dataset folder or fsspec URL (`s3://bucket/datasets/<id>`) holding manifest.json; None for
    synthetic data. A URL is copied into a verified local cache on each node."""
    manifest_id: str | None = None
    """Expected dataset id (sha256 of the canonical manifest); a mismatch refuses the run."""
    sequence_length: PositiveInt = Field(default=128, le=limits.MAX_SEQUENCE_LENGTH)
    """Tokens per training sequence (T)."""
    seed: int = Field(default=0, ge=0, le=limits.MAX_SEED)
    """Seed of the shuffle and mixture algorithms."""
    shuffle: str = Field(default="permute-v1", pattern=ALGORITHM_PATTERN)
    """Versioned shuffle algorithm."""
    mixture: MixtureSpec = Field(default_factory=MixtureSpec)
    """Source mixture."""
    packing: str = Field(default="concat-v1", pattern=ALGORITHM_PATTERN)
    """Versioned packing algorithm (`concat-v1` with EOD and reset positions, `pad-v1`)."""
    prefetch_batches: PositiveInt = Field(default=4, le=limits.MAX_BACKLOG)
    """Bound of the loader's prefetch queue (back-pressure)."""
    read_workers: PositiveInt = Field(default=2, le=limits.MAX_BACKLOG)
    """Parallel shard readers feeding the reorder buffer, besides the caller's thread; the
    loader starts at most one fewer than the cores the process may use."""
    read_delay_seconds: float = Field(default=0.0, ge=0.0, le=60.0)
    """Extra seconds every batch's hand-over waits (a throttled store that read-ahead cannot
    hide), declared so a slower data path is part of the spec: a baseline's deliberate
    regression, a drill. It shows as data wait; it changes only timing, never the data or its
    order."""
    on_corrupt_shard: Literal["fail", "skip"] = "fail"
    """What the loader does when a train shard fails verification or goes missing, at open or
    while the run reads it: `fail` raises ShardCorruptError naming the shard (failure class
    `data`); `skip` quarantines it (recorded in the data cursor, never by touching the dataset)
    and leaves its documents out from the next step on, the same on every rank and after every
    restart, and reports the documents and tokens lost (docs/data.md, "Corrupt or missing
    shards")."""
    source_growth: SourceGrowthSpec | None = None
    """A declared new version of growing sources (docs/data.md, "Growing sources"); without it a
    cursor of another dataset version is refused."""

    @field_validator("dataset")
    @classmethod
    def _dataset_url_names_a_bucket(cls, dataset: str | None) -> str | None:
        return dataset_location(dataset)


class OptimizerSpec(Section):
    """AdamW settings."""

    name: Literal["adamw"] = "adamw"
    """Optimizer; AdamW only for now."""
    lr: PositiveFloat = 3e-4
    """Peak learning rate."""
    betas: tuple[float, float] = (0.9, 0.95)
    """Adam beta1, beta2."""
    weight_decay: float = Field(default=0.1, ge=0.0)
    """Decoupled weight decay."""
    grad_clip_norm: PositiveFloat | None = 1.0
    """Global gradient-norm clip; None disables clipping."""

    @field_validator("betas")
    @classmethod
    def _betas_are_decay_rates(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"each Adam beta must be in [0, 1), e.g. [0.9, 0.95]; got {betas}")
        return betas


class ScheduleSpec(Section):
    """Learning-rate schedule: linear warm-up then decay."""

    warmup_steps: int = Field(default=0, ge=0, le=limits.MAX_STEPS)
    """Steps of linear warm-up from 0 to the peak rate."""
    decay: Literal["cosine", "linear", "constant"] = "cosine"
    """Shape after warm-up."""
    min_lr_ratio: float = Field(default=0.1, ge=0.0, le=1.0)
    """Final rate as a fraction of the peak."""


class TrainingSpec(Section):
    """The optimisation contract: batch, length, optimizer, schedule, precision."""

    global_batch_samples: PositiveInt | None = Field(default=None, le=limits.MAX_BATCH_SAMPLES)
    """Sequences per optimizer step across all data-parallel ranks."""
    global_batch_tokens: PositiveInt | None = Field(default=None, le=limits.MAX_BATCH_TOKENS)
    """Tokens per optimizer step; converted to samples by the sequence length."""
    micro_batch_size: PositiveInt | None = Field(default=None, le=limits.MAX_BATCH_SAMPLES)
    """Sequences per rank per forward pass; derived when omitted."""
    steps: PositiveInt | None = Field(default=None, le=limits.MAX_STEPS)
    """Optimizer steps to run."""
    token_budget: PositiveInt | None = Field(default=None, le=limits.MAX_TOKENS)
    """Training tokens to consume; converted to steps."""
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    """Optimizer settings."""
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    """Learning-rate schedule."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Compute precision of forward and backward (torch.autocast; parameters, gradients and
    optimizer state stay fp32): bf16 on CPU or GPU; fp16 on GPU only, with a gradient scaler
    (torch.amp.GradScaler) whose state every checkpoint saves."""
    loss_spike: LossSpikeSpec = Field(default_factory=LossSpikeSpec)
    """The loss-spike guard: threshold, window, action (skip, rollback, pause)."""
    integrity: IntegritySpec = Field(default_factory=IntegritySpec)
    """Silent-data-corruption checks: replica digests, recomputation, loss and norm bounds."""
    seed: int = Field(default=0, ge=0, le=limits.MAX_SEED)
    """Seed of model initialisation and dropout."""
    log_every_steps: PositiveInt = Field(default=1, le=limits.MAX_STEPS)
    """How often ranks report step metrics."""
    eval_every_steps: PositiveInt | None = Field(default=None, le=limits.MAX_STEPS)
    """The reference trainer evaluates on the dataset's eval split every K steps, after the
    step's checkpoint save (EVALUATED names that checkpoint); None: never."""
    eval_sequences: PositiveInt = Field(default=32, le=1_000_000)
    """Rows of sequence_length + 1 eval tokens each evaluation reads (the same rows every time)."""

    @model_validator(mode="after")
    def _one_batch_and_one_length(self) -> "TrainingSpec":
        if (self.global_batch_samples is None) == (self.global_batch_tokens is None):
            raise ValueError(
                "give exactly one of global_batch_samples or global_batch_tokens "
                f"(got samples={self.global_batch_samples}, tokens={self.global_batch_tokens})"
            )
        if (self.steps is None) == (self.token_budget is None):
            raise ValueError(
                "give exactly one of steps or token_budget "
                f"(got steps={self.steps}, token_budget={self.token_budget})"
            )
        return self
