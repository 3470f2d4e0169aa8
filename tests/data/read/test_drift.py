"""Data drift per window of steps (issue 15): the loader's MIXTURE_WINDOW reports, counted
against the cursor the loader keeps, resumed windows counted from the restored cursor, and the
`mixture_drift` alert reading them."""

from runwright import events
from runwright.data import DataLoader
from runwright.data.read.drift import LENGTH_BUCKETS
from runwright.events import EventType
from runwright.spec import DataSpec


def spec(**mixture: object) -> DataSpec:
    sources = [{"name": "code", "weight": 2}, {"name": "prose", "weight": 1}]
    return DataSpec.model_validate(
        {"sequence_length": 16, "seed": 3, "mixture": {"sources": sources, **mixture}}
    )


class Collector:
    def __init__(self) -> None:
        self.windows: list[dict] = []

    def __call__(self, type_, *, key=None, step=None, checkpoint_id=None, **attributes):
        if type_ == EventType.MIXTURE_WINDOW:
            self.windows.append({"step": step, "key": key, **attributes})


def read(folder, data, steps, state=None, **kw):
    collector = Collector()
    events.attach(collector)
    try:
        loader = DataLoader(folder, data, global_batch_samples=8, drift_window_steps=3, **kw)
        if state is not None:
            loader.load_state_dict(state)
        batches = [b for _, b in zip(range(steps), loader, strict=False)]
        cursor = loader.state_dict()
        loader.close()
    finally:
        events.detach(collector)
    return collector.windows, batches, cursor


def test_each_window_reports_what_the_cursor_counted_and_its_shares(two_source_dataset):
    folder, _, _ = two_source_dataset
    windows, batches, cursor = read(folder, spec(), 7)
    assert [(w["first_step"], w["last_step"]) for w in windows] == [(1, 3), (4, 6)]
    drawn = {name: sum(w["draws"][name] for w in windows) for name in ("code", "prose")}
    assert all(drawn[name] <= cursor["source_draws"][name] for name in drawn)
    first = windows[0]
    assert first["targets"] == {"code": round(2 / 3, 6), "prose": round(1 / 3, 6)}
    total = sum(first["draws"].values())
    assert first["shares"] == {k: round(v / total, 6) for k, v in first["draws"].items()}
    assert first["max_deviation"] == round(
        max(abs(first["shares"][n] - first["targets"][n]) for n in ("code", "prose")), 6
    )
    device = sum(b.device_tokens for b in batches[:3])
    assert first["loss_token_share"] == round(sum(b.loss_tokens for b in batches[:3]) / device, 6)
    pieces = sum(first["length_buckets"].values())
    assert pieces >= 3 * 8 and set(first["length_buckets"]) == {
        *(f"<={b}" for b in LENGTH_BUCKETS),
        f">{LENGTH_BUCKETS[-1]}",
    }


def test_a_resumed_loader_counts_its_windows_from_the_restored_cursor(two_source_dataset):
    folder, _, _ = two_source_dataset
    whole, _, _ = read(folder, spec(), 6)
    _, _, cursor = read(folder, spec(), 3)
    resumed, _, _ = read(folder, spec(), 3, state=cursor)
    assert [w["draws"] for w in resumed] == [whole[1]["draws"]]


def test_only_data_parallel_rank_0_reports_and_none_without_a_window(two_source_dataset):
    folder, _, _ = two_source_dataset
    windows, _, _ = read(folder, spec(), 6, dp_rank=1, dp_size=2)
    assert windows == []
    collector = Collector()
    events.attach(collector)
    try:
        loader = DataLoader(folder, spec(), global_batch_samples=8, drift_window_steps=None)
        [next(loader) for _ in range(6)]
        loader.close()
    finally:
        events.detach(collector)
    assert collector.windows == []


def test_windows_across_epoch_boundaries_count_what_each_epoch_handed_out(two_source_dataset):
    """The cursor's counts restart with each epoch: a window across a boundary adds the rest of
    the epoch it left to what the next one drew, so the windows add up to every draw."""
    folder, _, _ = two_source_dataset
    sources = [
        {"name": "code", "weight": 1, "exhaustion": "renormalise"},
        {"name": "prose", "weight": 1, "exhaustion": "renormalise"},
    ]
    data = DataSpec.model_validate(
        {"sequence_length": 16, "seed": 3, "mixture": {"sources": sources}}
    )
    windows, _, cursor = read(folder, data, 3 * 60)
    assert cursor["epoch"] >= 2  # the 180 documents drawn more than twice over
    assert all(min(w["draws"].values()) >= 0 for w in windows)
    drawn = sum(sum(w["draws"].values()) for w in windows)
    epochs_before = cursor["epoch"] * 180
    assert drawn <= epochs_before + sum(cursor["source_draws"].values())
    # What the last window left out is at most its own few steps' worth.
    assert drawn > epochs_before + sum(cursor["source_draws"].values()) - 3 * 8 * 4
    # `prose` runs out first in each epoch: windows of `code` alone drift by a half.
    assert max(w["max_deviation"] for w in windows) == 0.5
