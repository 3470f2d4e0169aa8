"""The build's statistics as the drift baseline (issue 26): each MIXTURE_WINDOW of a real loader
carries the train split's shares per source and its distance from them."""

from runwright import events
from runwright.data import DataLoader
from runwright.events import EventType
from runwright.spec import DataSpec


def test_windows_report_shares_against_the_build(two_source_dataset):
    folder, manifest, _ = two_source_dataset
    windows: list[dict] = []

    def collect(type_, *, key=None, step=None, checkpoint_id=None, **attributes):
        if type_ == EventType.MIXTURE_WINDOW:
            windows.append(attributes)

    data = DataSpec.model_validate({"sequence_length": 16, "seed": 3})  # no weights
    events.attach(collect)
    try:
        loader = DataLoader(folder, data, global_batch_samples=8, drift_window_steps=3)
        [next(loader) for _ in range(6)]
        loader.close()
    finally:
        events.detach(collect)
    train = manifest.statistics.splits["train"]
    total = sum(s.documents for s in train.values())
    assert len(windows) == 2
    for w in windows:
        assert w["baseline"] == {k: round(s.documents / total, 6) for k, s in train.items()}
        expected = max(abs(w["shares"].get(k, 0.0) - w["baseline"][k]) for k in train)
        assert w["baseline_deviation"] == round(expected, 6)
        assert w["max_deviation"] is None
