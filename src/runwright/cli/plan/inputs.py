"""Shared pieces of the `runwright plan` commands: the option types they have in common, the
resolution of flags against a spec (flag, else spec, else default), the model built from either,
and the unit formatting of bytes and seconds."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from runwright.plan import PlanError, Recompute
from runwright.plan.base import GIB
from runwright.spec import JobSpec, ModelSpec, load_spec

T = TypeVar("T")

SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        help="Job spec file; its model (and data, training, resources) "
        "sections supply defaults that flags override.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
LayersOpt = Annotated[int | None, typer.Option("--layers", help="Transformer blocks (L).")]
DModelOpt = Annotated[int | None, typer.Option("--d-model", help="Hidden size (h).")]
HeadsOpt = Annotated[int | None, typer.Option("--heads", help="Attention heads (a).")]
DffOpt = Annotated[int | None, typer.Option("--d-ff", help="MLP inner size; default 4 x d-model.")]
VocabOpt = Annotated[int | None, typer.Option("--vocab", help="Vocabulary size (V).")]
SeqOpt = Annotated[int | None, typer.Option("--seq-len", help="Tokens per sequence (s).")]
MicroOpt = Annotated[
    int | None, typer.Option("--micro-batch-size", help="Sequences per rank per forward (b).")
]
ZeroOpt = Annotated[
    int, typer.Option("--zero-stage", min=0, max=3, help="ZeRO stage 0-3 over the dp group.")
]
RecomputeOpt = Annotated[Recompute, typer.Option("--recompute", help="Activation recomputation.")]
SpOpt = Annotated[
    bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism (with tp).")
]
HeadroomOpt = Annotated[
    float, typer.Option("--headroom", help="Fraction of device memory kept free, in [0, 1).")
]
MemoryGibOpt = Annotated[
    float | None, typer.Option("--device-memory-gib", help="Memory per device (GiB).")
]
BuffersGibOpt = Annotated[
    float, typer.Option("--buffers-gib", help="Declared buffers per device (GiB).")
]


def validated(build: Callable[[], T], what: str) -> T:
    """Build a record, turning pydantic's complaint into a one-paragraph user error."""
    try:
        return build()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or what}: "
            f"{str(err['msg']).removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise PlanError(f"invalid {what}: {problems}") from None


def optional_spec(path: Path | None) -> JobSpec | None:
    """The spec at `path`, or None when no `--spec` was given."""
    return None if path is None else load_spec(path)


def pick(flag: T | None, from_spec: T | None, default: T | None = None) -> T | None:
    """The flag if given, else the spec's value if it has one, else the default."""
    return flag if flag is not None else from_spec if from_spec is not None else default


def model_from(
    spec: JobSpec | None,
    layers: int | None,
    d_model: int | None,
    heads: int | None,
    d_ff: int | None,
    vocab: int | None,
) -> ModelSpec:
    """The spec's model with any given flag overriding its field; flags alone need L, h and a."""
    base = spec.model if spec is not None else None
    if base is None and None in (layers, d_model, heads):
        raise PlanError(
            "give the model: --spec FILE, or at least --layers, --d-model and --heads "
            "(and --vocab, --d-ff to override their defaults)"
        )
    fields: dict[str, Any] = base.model_dump() if base is not None else {}
    given = {
        "n_layers": layers,
        "d_model": d_model,
        "n_heads": heads,
        "d_ff": d_ff,
        "vocab_size": vocab,
    }
    fields.update({k: v for k, v in given.items() if v is not None})
    return validated(lambda: ModelSpec(**fields), "model")


def gib_to_bytes(value: float | None) -> int | None:
    """GiB from a flag to whole bytes (1 GiB = 2**30 bytes)."""
    return None if value is None else round(value * GIB)


def as_int(value: int | float | None) -> int | None:
    return None if value is None else int(value)


def format_bytes(num_bytes: float) -> str:
    """Bytes in the largest binary unit they fill: 3 * 2**20 -> '3.00 MiB'."""
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.2f} {unit}"
    return f"{num_bytes:,.0f} B"


def format_seconds(value: float) -> str:
    """Seconds with the hours or minutes beside them when long, milliseconds when short."""
    if value >= 3600:
        return f"{value:,.0f} s ({value / 3600:.2f} h)"
    if value >= 60:
        return f"{value:,.0f} s ({value / 60:.1f} min)"
    if value >= 1:
        return f"{value:.3f} s"
    return f"{value * 1e3:.3f} ms"
