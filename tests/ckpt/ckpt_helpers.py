"""Small training states shared by the checkpoint tests and their child processes."""

import torch

from runwright.ckpt import TrainState


class CountingLoader:
    """A data loader stand-in whose state is a JSON cursor."""

    def __init__(self, position: int = 0) -> None:
        self.position = position

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def make_state(seed: int = 0, width: int = 64, steps: int = 1) -> TrainState:
    """A model, AdamW, a step LR schedule and a loader, trained `steps` steps from `seed`."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    for _ in range(steps):
        model(torch.randn(8, width)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    loader = CountingLoader(position=steps * 8)
    return TrainState(
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        data_loader=loader,
        counters={"tokens_seen": steps * 8 * width},
    )


def params(state: TrainState) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in state.model.state_dict().items()}


def same_params(state: TrainState, expected: dict[str, torch.Tensor]) -> bool:
    current = state.model.state_dict()
    return all(torch.equal(current[k], v) for k, v in expected.items())


def saved_record(state: TrainState) -> dict:
    """What a save of `state` must bring back: parameters, the first AdamW moment, the cursor and
    the counters. A crash child writes this beside its root before each save, so its test checks
    the restore against the very values that were saved, not against a recomputation in another
    process (a stray bit there is no mixture; CI once failed on one)."""
    return {
        "params": params(state),
        "exp_avg": state.optimizer.state_dict()["state"][0]["exp_avg"].clone(),
        "position": state.data_loader.position,
        "counters": dict(state.counters),
    }


def differences(state: TrainState, record: dict) -> list[str]:
    """What in `state` differs from `record` (`saved_record`); empty when it is that save."""
    now = saved_record(state)
    wrong = [k for k, v in record["params"].items() if not torch.equal(now["params"][k], v)]
    if not now["exp_avg"].equal(record["exp_avg"]):
        wrong.append("optimizer exp_avg")
    wrong += [key for key in ("position", "counters") if now[key] != record[key]]
    return wrong
