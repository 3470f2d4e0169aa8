"""First-fit placement, for the `fifo-firstfit-v1` baseline policy (admission.py).

It keeps every constraint best fit keeps (whole gangs, `tp` groups inside fast domains, whole
nodes with `devices_per_node`, one network domain when asked) and differs only in choice: the
domains and nodes are taken in name order, each as far as it goes. The benchmark compares the
policies on the same arrivals, so the difference it shows is the policy's, not a broken
constraint's.
"""

from collections.abc import Mapping

from runwright.sched.placement import Eligible, Shape


def place_first_fit(
    shape: Shape, eligible: Eligible, usable: Mapping[str, int]
) -> list[tuple[str, int]]:
    """(node, device count) of the first-fit placement; [] if none."""
    if not shape.same_network_domain:
        return _first_fit_in(shape, eligible.fast, usable)
    for name in sorted(eligible.network):
        found = _first_fit_in(shape, eligible.network[name], usable)
        if found:
            return found
    return []


def _first_fit_in(
    shape: Shape, fast: Mapping[str, list[str]], usable: Mapping[str, int]
) -> list[tuple[str, int]]:
    chosen: list[tuple[str, int]] = []
    remaining = shape.devices
    per = shape.devices_per_node
    for domain in sorted(fast):
        if remaining == 0:
            break
        nodes = fast[domain]
        if per:
            fitting = [n for n in nodes if usable.get(n, 0) >= per]
            amount = len(fitting) * per
        else:
            fitting = [n for n in nodes if usable.get(n, 0) > 0]
            amount = sum(usable.get(n, 0) for n in fitting)
        take = min(amount - amount % shape.unit, remaining)
        remaining -= take
        for node in fitting:
            if take == 0:
                break
            k = per if per else min(usable.get(node, 0), take)
            chosen.append((node, k))
            take -= k
    return chosen if remaining == 0 else []
