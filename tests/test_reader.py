import copy
import gzip
import json

import numpy as np
import pytest

from maxshard.reader import InputError, read_instance

from .conftest import EXAMPLE, write_problem

BASE = json.loads(EXAMPLE.read_text())


def test_example_arrays(example):
    assert example.n == 5 and example.m == 5
    assert example.n_strategies.tolist() == [1, 2, 3, 2, 1]
    assert example.usage_limit == 50
    assert example.edge_table(2).tolist() == [[90, 10], [20, 80]]
    assert example.lo.tolist() == [30, 40, 50, 110, 110]


def test_gzip_and_plain_read_the_same(tmp_path, example):
    gz = tmp_path / "example.json.gz"
    gz.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    again = read_instance(gz)
    for field in ("strat_off", "cost", "usage", "lo", "hi", "edge_u", "edge_v", "edge_cost"):
        assert np.array_equal(getattr(again, field), getattr(example, field))


def test_no_usage_limit_and_no_edges(tmp_path):
    p = copy.deepcopy(BASE)
    del p["problem"]["usage_limit"]
    del p["problem"]["edges"]
    inst = read_instance(write_problem(tmp_path / "p.json", p))
    assert inst.usage_limit is None and inst.m == 0


def broken(path, edit):
    p = copy.deepcopy(BASE)
    edit(p["problem"])
    return write_problem(path / "bad.json", p)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p["nodes"]["costs"].__setitem__(1, [55]), "node 1 has 1 costs but 2 usages"),
        (lambda p: p["nodes"]["costs"].__setitem__(0, []), "node 0 has no strategy"),
        (lambda p: p["nodes"]["intervals"].pop(), "5 nodes but 4 intervals"),
        (lambda p: p["nodes"]["usages"].pop(), "5 cost lists but 4 usage lists"),
        (lambda p: p["edges"]["costs"].__setitem__(2, [1, 2, 3]), "edge 2 [1, 3] has 3 costs"),
        (lambda p: p["edges"]["nodes"].__setitem__(4, [3, 9]), "edge 4 [3, 9] names a node"),
        (lambda p: p["edges"]["costs"].pop(), "5 edges but 4 edge cost tables"),
        (lambda p: p["nodes"]["costs"][2].__setitem__(0, -1), "costs[2][0]"),
        (lambda p: p["nodes"]["usages"][2].__setitem__(0, 1.5), "Expected `int`, got `float`"),
        (lambda p: p["nodes"]["intervals"].__setitem__(0, [9, 3]), "ending before it starts"),
        (lambda p: p.__setitem__("usage_limit", -5), "usage_limit"),
        (lambda p: p["nodes"].__setitem__("costs", []), "no nodes"),
        (lambda p: p["nodes"]["costs"][0].__setitem__(0, 2**70), "costs[0][0]"),
        (lambda p: p.pop("nodes"), "missing required field `nodes`"),
    ],
)
def test_validation_errors_name_the_problem(tmp_path, edit, message):
    with pytest.raises(InputError, match=None) as err:
        read_instance(broken(tmp_path, edit))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_malformed_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"problem": {"nodes": ')
    with pytest.raises(InputError, match="malformed JSON"):
        read_instance(bad)
    with pytest.raises(InputError, match="no such file"):
        read_instance(tmp_path / "missing.json")
    gz = tmp_path / "bad.json.gz"
    gz.write_bytes(gzip.compress(b"{}")[:12])
    with pytest.raises(InputError, match="gzip"):
        read_instance(gz)
