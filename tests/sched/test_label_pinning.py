"""Pinning a gang to nodes whose labels match (spec `resources.node_labels`, issue 27): only
nodes carrying every label (a version, or a KEY=VALUE feature) are placed on, and labels no node
carries make the run never fit, with the labels named."""

from runwright.control.gangs import gang_request
from runwright.sched.admission import admit
from runwright.sched.inventory import Inventory, NodeLabels
from runwright.sched.requests import AdmissionInput, GangRequest
from runwright.spec import spec_from_mapping


def labelled(make_cluster) -> Inventory:
    inventory = make_cluster(islands=2, nodes_per_island=1)  # i0n0, i1n0: 8 devices each
    old, new = inventory.nodes
    nodes = (
        old.model_copy(update={"labels": NodeLabels(versions={"driver": "535", "nccl": "2.18"})}),
        new.model_copy(
            update={"labels": NodeLabels(versions={"driver": "550"}, features=("nccl=2.21",))}
        ),
    )
    return inventory.model_copy(update={"nodes": nodes})


def test_a_gang_goes_only_to_nodes_with_its_labels(make_cluster):
    inventory = labelled(make_cluster)
    pinned = GangRequest(run_id="new", devices=4, node_labels=(("driver", "550"), ("nccl", "2.21")))
    old = GangRequest(run_id="old", devices=4, node_labels=(("driver", "535"),))
    result = admit(inventory, AdmissionInput(pending=(pinned, old)))
    assert [s.node for s in result.of("new").placement] == ["i1n0"]
    assert [s.node for s in result.of("old").placement] == ["i0n0"]


def test_labels_no_node_carries_never_fit_by_name(make_cluster):
    inventory = labelled(make_cluster)
    result = admit(
        inventory,
        AdmissionInput(
            pending=(GangRequest(run_id="r", devices=4, node_labels=(("driver", "560"),)),)
        ),
    )
    reason = result.of("r").reason
    assert reason.never_fits and "carries the labels driver=560" in reason.words


def test_the_spec_field_reaches_the_request():
    spec = spec_from_mapping(
        {"name": "p", "code": {"entrypoint": "x.py"},
         "training": {"steps": 1, "global_batch_samples": 1},
         "resources": {"node_labels": {"torch": "2.13.0", "driver": "550"}}},
    )  # fmt: skip
    request = gang_request("r", "default", 0.0, spec)
    assert request.node_labels == (("driver", "550"), ("torch", "2.13.0"))
