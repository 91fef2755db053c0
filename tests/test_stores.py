"""ArtifactStore: uniform and weighted draws, a size cap, files, and state that round-trips."""

import random
from collections import Counter

import pytest

from sp_lightning.stores import ArtifactStore


def test_uniform_draws_every_item_alike_and_weighted_draws_by_weight():
    uniform = ArtifactStore(["a", "b", "c"])
    uniform.set_weight(0, 100.0)  # weights do not matter to uniform sampling
    counts = Counter(uniform.sample(random.Random(0), 3000))
    assert set(counts) == {"a", "b", "c"} and all(900 < n < 1100 for n in counts.values())
    weighted = ArtifactStore(["a", "b", "c"], sampling="weighted")
    weighted.set_weight(0, 0.0)
    weighted.set_weight(2, 3.0)
    counts = Counter(weighted.sample(random.Random(0), 4000))
    assert "a" not in counts and 2880 < counts["c"] < 3120  # 3 : 1 against b (3000, sd 27)


def test_the_same_rng_draws_the_same_items():
    store = ArtifactStore(range(10), sampling="weighted")
    assert store.sample(random.Random(5), 20) == store.sample(random.Random(5), 20)


def test_a_full_store_drops_its_oldest_items():
    store = ArtifactStore(max_size=2)
    for item in ("q1", "q2", "q3"):
        store.add(item)
    assert store.items == ["q2", "q3"] and len(store) == 2


def test_items_from_a_file_and_state_round_trip(tmp_path):
    lines = tmp_path / "topics.txt"
    lines.write_text("one\n\n two \n")
    assert ArtifactStore.from_file(lines).items == ["one", "two"]
    listed = tmp_path / "items.json"
    listed.write_text('[{"q": 1}, {"q": 2}]')
    store = ArtifactStore.from_file(listed, sampling="weighted")
    store.set_weight(1, 0.5)
    restored = ArtifactStore()
    restored.load_state_dict(store.state_dict())
    assert restored.items == [{"q": 1}, {"q": 2}] and restored.weights == [1.0, 0.5]


def test_bad_use_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="topics.sampling: expected one of"):
        ArtifactStore(sampling="greedy", name="topics")
    with pytest.raises(ValueError, match="cannot sample from an empty store"):
        ArtifactStore().sample(random.Random(0))
    with pytest.raises(ValueError, match="every weight is 0"):
        store = ArtifactStore(["a"], sampling="weighted")
        store.set_weight(0, 0.0)
        store.sample(random.Random(0))
    with pytest.raises(ValueError, match="expected a weight >= 0"):
        ArtifactStore().add("x", weight=float("nan"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no items"):
        ArtifactStore.from_file(empty)
