"""What an admission pass derives from the inventory alone, kept for the next pass over the same
inventory (sched/pass_state.py)."""

from runwright.sched.inventory import Inventory
from runwright.sched.pass_records import Kind
from runwright.sched.placement import Eligible
from runwright.sched.reasons import PendingReason


class InventoryIndex:
    """What a pass derives from the inventory alone (eligible node sets, never-fits verdicts),
    kept for the next pass over the same Inventory object: records are frozen, so the same
    object means the same nodes, and a controller passes the same one until a node changes."""

    def __init__(self, inventory: Inventory) -> None:
        self.nodes = {node.name: node for node in inventory.nodes}
        self.offered = [node for node in inventory.nodes if node.offered]
        self.eligible: dict[tuple[Kind, bool], Eligible] = {}
        self.static: dict[tuple, PendingReason | None] = {}
        self.out_of_service: dict[Kind, int] = {}
        self._members: dict[Kind, set[str]] = {}

    def members(self, kind: Kind, eligible: Eligible) -> set[str]:
        if kind not in self._members:
            self._members[kind] = set(eligible.nodes)
        return self._members[kind]


_LAST_INDEX: list[tuple[Inventory, InventoryIndex]] = []


def index_of(inventory: Inventory) -> InventoryIndex:
    """The index of `inventory`, reused when the last pass had the same object."""
    if _LAST_INDEX and _LAST_INDEX[0][0] is inventory:
        return _LAST_INDEX[0][1]
    index = InventoryIndex(inventory)
    _LAST_INDEX[:] = [(inventory, index)]
    return index
