import json

import pytest

from sp_lightning.league.exploration import NGramCoverage


def test_bigram_coverage_by_hand():
    cov = NGramCoverage(n=2)
    cov.add("a", ["[0]", "[1]", "[0]", "[1]"])  # bigrams 01 10 01: 2 distinct of 3
    assert cov.distinct("a") == 2
    assert cov.total("a") == 3
    assert cov.coverage("a") == pytest.approx(2 / 3)
    cov.add("a", ["[1]", "[0]", "[2]"])  # 10 (seen) 02 (new): 3 distinct of 5
    assert cov.coverage("a") == pytest.approx(3 / 5)


def test_ngrams_do_not_span_sequences_and_short_sequences_add_nothing():
    cov = NGramCoverage(n=2)
    cov.add("a", ["[bet]"])
    cov.add("a", ["[check]"])
    assert cov.total("a") == 0 and cov.coverage("a") == 0.0
    cov.add("a", ["[bet]", "[check]"])
    assert cov.coverage("a") == 1.0


def test_several_ns_and_agents_apart():
    cov = NGramCoverage(ns=(1, 2, 3))
    cov.add("a", ["x", "x", "x"])  # 1-grams: 1 of 3; 2-grams: 1 of 2; 3-grams: 1 of 1
    cov.add("b", ["x", "y", "z"])
    assert cov.coverages("a") == pytest.approx({1: 1 / 3, 2: 1 / 2, 3: 1.0})
    assert cov.coverages("b") == pytest.approx({1: 1.0, 2: 1.0, 3: 1.0})
    assert cov.coverage("a") == pytest.approx(1 / 3)  # the first n is the default
    assert cov.distinct("a", 1) == 1 and cov.distinct("b", 1) == 3
    assert cov.coverage("unknown") == 0.0 and cov.distinct("unknown") == 0
    with pytest.raises(ValueError, match="not tracked"):
        cov.coverage("a", n=4)


def test_bad_arguments():
    with pytest.raises(ValueError, match=">= 1"):
        NGramCoverage(n=0)
    with pytest.raises(ValueError, match="distinct"):
        NGramCoverage(ns=(2, 2))
    with pytest.raises(TypeError, match="sequence of move strings"):
        NGramCoverage().add("a", "[0][1]")


def test_state_dict_round_trip_through_json():
    cov = NGramCoverage(ns=(1, 2))
    cov.add("a", ["[0]", "[1]", "[0]"])
    cov.add("b", ["[2]", "[2]"])
    state = json.loads(json.dumps(cov.state_dict()))
    restored = NGramCoverage(ns=(1, 2))
    restored.load_state_dict(state)
    for agent in ("a", "b"):
        assert restored.coverages(agent) == cov.coverages(agent)
        assert restored.distinct(agent, 2) == cov.distinct(agent, 2)
    restored.add("a", ["[0]", "[1]"])  # an already-seen bigram keeps counting as seen
    assert restored.distinct("a", 2) == 2 and restored.total("a", 2) == 3
    with pytest.raises(ValueError, match="n-gram lengths"):
        NGramCoverage(n=3).load_state_dict(state)
