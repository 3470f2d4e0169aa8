"""`runwright plan comm`: the ring collective ledger, bytes each rank sends and the alpha-beta
time of each operation."""

from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.plan.inputs import (
    DffOpt,
    DModelOpt,
    HeadsOpt,
    JsonOpt,
    LayersOpt,
    SpecOpt,
    VocabOpt,
    format_bytes,
    format_seconds,
    model_from,
    optional_spec,
    pick,
    validated,
)
from runwright.cli.render import console, guarded, print_json
from runwright.plan import Link, PlanError, collective_table, parameters_per_device


@guarded
def comm(
    payload_bytes: Annotated[
        float | None,
        typer.Option(
            "--bytes",
            help="Per-rank payload G (bytes); default: the model's gradient bytes per device.",
        ),
    ] = None,
    ranks: Annotated[
        int | None, typer.Option("--ranks", help="Group size D (default: the spec's dp).")
    ] = None,
    latency_microseconds: Annotated[
        float, typer.Option("--latency-microseconds", help="alpha per round (µs).")
    ] = 10.0,
    bandwidth_gb_per_second: Annotated[
        float, typer.Option("--bandwidth-gb-per-second", help="beta (GB/s, 1e9 bytes/s).")
    ] = 25.0,
    microbatches: Annotated[
        int, typer.Option("--microbatches", help="Micro-batches per step (pipeline row).")
    ] = 1,
    spec_file: SpecOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    d_ff: DffOpt = None,
    vocab: VocabOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ring collective ledger: bytes each rank sends and alpha-beta time per operation."""
    spec = optional_spec(spec_file)
    if payload_bytes is None:
        model = model_from(spec, layers, d_model, heads, d_ff, vocab)
        tp = spec.parallelism.tp if spec else 1
        pp = spec.parallelism.pp if spec else 1
        # bf16 gradients: 2 bytes per parameter held on the device.
        payload_bytes = 2.0 * parameters_per_device(model, tp, pp)
    group = pick(ranks, spec.plan.dp.value if spec else None)
    if group is None:
        raise PlanError("give the group size: --ranks D, or --spec FILE to use its dp")
    link = validated(
        lambda: Link(
            latency_seconds=latency_microseconds * 1e-6,
            bandwidth_bytes_per_second=bandwidth_gb_per_second * 1e9,
        ),
        "link",
    )
    rows = collective_table(payload_bytes, group, link, microbatches)
    if as_json:
        print_json({"link": link.model_dump(), "collectives": [r.model_dump() for r in rows]})
        return
    table = Table(
        title=f"ring collectives: G = {format_bytes(payload_bytes)}, D = {group}, "
        f"alpha = {latency_microseconds:g} µs, beta = {bandwidth_gb_per_second:g} GB/s"
    )
    for column in ("operation", "rounds", "sent per rank", "bytes sent per rank", "time"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for r in rows:
        table.add_row(
            r.collective.value,
            str(r.rounds),
            format_bytes(r.bytes_sent_per_rank),
            f"{r.bytes_sent_per_rank:,.0f}",
            format_seconds(r.seconds),
        )
    console.print(table)
    console.print(
        f"[dim]pipeline-boundary: {microbatches} micro-batch(es), one activation forward and "
        "one gradient backward each; bytes received are not counted[/]"
    )
