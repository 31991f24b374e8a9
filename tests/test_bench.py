"""tools/bench.py's reading of a run's curve from its trace."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "bench", Path(__file__).resolve().parent.parent / "tools" / "bench.py"
)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

# (seconds from the start, best cost, best bound) at each improvement, as --out writes it
TRACE = [(0.1, None, None), (2.0, 400, None), (3.5, 250, 90), (7.0, 200, 90), (9.0, 200, 120)]


def test_time_to_best_is_when_the_answer_first_reached_the_reference():
    assert bench.time_to_best(TRACE, 250) == 3.5
    assert bench.time_to_best(TRACE, 260) == 3.5
    assert bench.time_to_best(TRACE, 200) == 7.0
    assert bench.time_to_best(TRACE, 199) is None  # never
    assert bench.time_to_best([], 200) is None


def test_score_at_reads_the_best_answer_held_at_that_time():
    assert bench.score_at(TRACE, 200, 1.0) is None  # no answer yet
    assert bench.score_at(TRACE, 200, 2.0) == 0.5
    assert bench.score_at(TRACE, 200, 5.0) == 0.8
    assert bench.score_at(TRACE, 200, 100.0) == 1.0
