"""The rank manifest: for every global rank, where it runs and its parallel coordinates."""

from pydantic import BaseModel, ConfigDict


class RankEntry(BaseModel):
    """One rank's placement and coordinates in the (pp, dp, tp) grid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int
    local_rank: int
    node: int
    """Node index within the allocation."""
    host: str
    device: str
    """`cpu` or `cuda:<local_rank>`."""
    dp: int
    tp: int
    pp: int


def build_rank_manifest(
    *,
    nodes: int,
    devices_per_node: int,
    dp: int,
    tp: int,
    pp: int,
    device_type: str,
    hosts: list[str],
) -> list[RankEntry]:
    """Lay ranks out with tp innermost (so a tensor-parallel group shares a node's fast links),
    then dp, then pp: rank = (pp_i * dp + dp_i) * tp + tp_i, as Megatron-LM orders them."""
    world = nodes * devices_per_node
    entries = []
    for rank in range(world):
        tp_i = rank % tp
        dp_i = (rank // tp) % dp
        pp_i = rank // (tp * dp)
        node, local = divmod(rank, devices_per_node)
        entries.append(
            RankEntry(
                rank=rank,
                local_rank=local,
                node=node,
                host=hosts[node],
                device="cpu" if device_type == "cpu" else f"cuda:{local}",
                dp=dp_i,
                tp=tp_i,
                pp=pp_i,
            )
        )
    return entries
