"""`runwright plan memory`: the per-device memory ledger (ZeRO model states, activations,
buffers) and whether it fits the device."""

from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.plan.inputs import (
    BuffersGibOpt,
    DffOpt,
    DModelOpt,
    HeadroomOpt,
    HeadsOpt,
    JsonOpt,
    LayersOpt,
    MemoryGibOpt,
    MicroOpt,
    RecomputeOpt,
    SeqOpt,
    SpecOpt,
    SpOpt,
    VocabOpt,
    ZeroOpt,
    format_bytes,
    gib_to_bytes,
    model_from,
    optional_spec,
    pick,
    validated,
)
from runwright.cli.render import console, guarded, print_json
from runwright.plan import (
    MemoryLedger,
    Offload,
    PlanError,
    Recompute,
    StateBytes,
    ZeroStage,
    activation_bytes_per_device,
    activation_bytes_per_layer,
    memory_ledger,
    parameters_per_device,
)
from runwright.plan.base import GIB


def render_ledger(ledger: MemoryLedger, title: str) -> None:
    table = Table(title=title)
    table.add_column("row")
    table.add_column("bytes per device", justify="right")
    table.add_column("GiB", justify="right")
    for name, value in ledger.rows():
        style = "bold" if name == "total" else None
        table.add_row(name, f"{value:,.0f}", f"{value / GIB:,.3f}", style=style)
    console.print(table)
    if ledger.host_bytes:
        console.print(f"offloaded to host memory: {format_bytes(ledger.host_bytes)} per device")
    if ledger.fits is not None and ledger.usable_bytes is not None:
        verdict = "[green]fits[/]" if ledger.fits else "[red]does not fit[/]"
        console.print(
            f"{verdict}: {format_bytes(ledger.total_bytes)} of {format_bytes(ledger.usable_bytes)} "
            f"usable ({format_bytes(ledger.device_memory_bytes or 0)} less "
            f"{100 * ledger.headroom_fraction:.0f}% headroom)"
        )
    console.print(f"[dim]{ledger.note}[/]")


@guarded
def memory(
    spec_file: SpecOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    d_ff: DffOpt = None,
    vocab: VocabOpt = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel degree (D).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree (t).")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel degree.")] = None,
    zero_stage: ZeroOpt = 0,
    offload: Annotated[Offload, typer.Option("--offload", help="Move states to host.")] = (
        Offload.NONE
    ),
    seq_len: SeqOpt = None,
    micro_batch_size: MicroOpt = None,
    sequence_parallel: SpOpt = False,
    recompute: RecomputeOpt = Recompute.NONE,
    parameter_bytes: Annotated[float, typer.Option(help="Bytes per working weight.")] = 2.0,
    gradient_bytes: Annotated[float, typer.Option(help="Bytes per gradient.")] = 2.0,
    optimizer_bytes: Annotated[
        float, typer.Option(help="Optimizer-state bytes per parameter (ZeRO's K).")
    ] = 12.0,
    buffers_gib: BuffersGibOpt = 0.0,
    device_memory_gib: MemoryGibOpt = None,
    params: Annotated[
        float | None,
        typer.Option(
            "--params",
            help="Parameter count as papers state it (7.5e9), instead of "
            "a model shape; activations then need the shape too.",
        ),
    ] = None,
    headroom: HeadroomOpt = 0.1,
    as_json: JsonOpt = False,
) -> None:
    """Per-device memory ledger: ZeRO model states, activations, buffers, and the fit.

    `--params 7.5e9` takes the parameter count as papers state it: the model states are then
    that count split evenly over tp x pp, and activations are counted only when a model shape
    is given too (--spec, or --layers, --d-model and --heads)."""
    spec = optional_spec(spec_file)
    shaped = spec is not None or None not in (layers, d_model, heads)
    if params is not None and (params < 1 or params != params):
        raise PlanError(f"--params={params} must be a positive parameter count, e.g. 7.5e9")
    model = None
    if shaped or params is None:
        model = model_from(spec, layers, d_model, heads, d_ff, vocab)
    dp_ = pick(dp, spec.plan.dp.value if spec else None, 1)
    tp_ = pick(tp, spec.parallelism.tp if spec else None, 1)
    pp_ = pick(pp, spec.parallelism.pp if spec else None, 1)
    seq = pick(seq_len, spec.data.sequence_length if spec else None, 2048)
    micro = pick(micro_batch_size, spec.plan.micro_batch_size.value if spec else None, 1)
    capacity = pick(
        gib_to_bytes(device_memory_gib), spec.resources.device_memory_bytes if spec else None
    )
    state = validated(
        lambda: StateBytes(
            parameter_bytes=parameter_bytes,
            gradient_bytes=gradient_bytes,
            optimizer_bytes=optimizer_bytes,
        ),
        "bytes per parameter",
    )
    per_layer = (
        activation_bytes_per_layer(
            seq, micro, model.d_model, model.n_heads, tp_, sequence_parallel, recompute
        )
        if model is not None
        else 0.0
    )
    count = int(params) if params is not None else (model.parameter_count if model else 0)
    if params is not None:
        on_device = -(-int(params) // (tp_ * pp_))  # an even split, rounded up
    else:
        assert model is not None
        on_device = parameters_per_device(model, tp_, pp_)
    ledger = memory_ledger(
        on_device,
        activations_bytes=(
            activation_bytes_per_device(per_layer, model.n_layers, pp_) if model else 0.0
        ),
        dp=dp_,
        zero_stage=ZeroStage(zero_stage),
        state=state,
        offload=offload,
        buffers_bytes=buffers_gib * GIB,
        device_memory_bytes=capacity,
        headroom_fraction=headroom,
    )
    if as_json:
        print_json(
            {
                "model": (
                    {**model.model_dump(), "parameter_count": count}
                    if model is not None
                    else {"parameter_count": count}
                ),
                "layout": {
                    "dp": dp_,
                    "tp": tp_,
                    "pp": pp_,
                    "zero_stage": zero_stage,
                    "offload": offload.value,
                },
                "activations": {
                    "sequence_length": seq,
                    "micro_batch_size": micro,
                    "sequence_parallel": sequence_parallel,
                    "recompute": recompute.value,
                    "bytes_per_layer": per_layer,
                },
                "ledger": ledger.model_dump(mode="json"),
            }
        )
        return
    render_ledger(
        ledger,
        f"memory per device: {count:,} parameters, dp={dp_} tp={tp_} "
        f"pp={pp_}, ZeRO-{zero_stage}, s={seq} b={micro}, recompute={recompute.value}",
    )
