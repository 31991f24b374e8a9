"""Export to WCNF, OPB, LP, MPS and CFN; outside solvers read the files; restore
brings their answers back, re-costed by the evaluator: the contest's optimum."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from maxshard.evaluate import evaluate
from maxshard.formats import FormatError, Header, export, format_of, read_header, restore
from maxshard.generate import generate
from maxshard.model import fingerprint
from maxshard.reader import read_instance
from maxshard.reduce import Infeasible, reduce

from .conftest import BENCHMARKS, contest_optimum, write_problem

BIN = Path(sys.executable).parent
FORMATS = ["wcnf", "opb", "lp", "mps", "cfn"]


def outside(fmt: str, path: Path, tmp: Path) -> str | None:
    """An outside solver's answer to the file, as it would print it (None: no answer)."""
    if fmt == "wcnf":  # RC2 reading the file; its answer in the MaxSAT Evaluation form
        from pysat.examples.rc2 import RC2
        from pysat.formula import WCNF

        with RC2(WCNF(from_file=str(path))) as rc2:
            model = rc2.compute()
        return None if model is None else "s OPTIMUM FOUND\nv " + " ".join(map(str, model))
    if fmt in ("lp", "mps"):  # HiGHS reading the file, its solution file
        import highspy

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.readModel(str(path))
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kModelEmpty:
            return ""  # presolve solved it all: the answer is the empty model's
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        h.writeSolution(str(tmp / "answer.sol"), 0)
        return (tmp / "answer.sol").read_text()
    import pytoulbar2  # toulbar2 reading the CFN or OPB file

    cfn = pytoulbar2.CFN(verbose=-1)
    cfn.Option.resolution = 0  # integer costs (its OPB reader scales by 10^resolution)
    try:
        cfn.Read(str(path))
    except cfn.Contradiction:
        return None
    found = cfn.Solve(timeLimit=30)
    if not found:
        return None
    if fmt == "cfn":  # its values, space-separated on one line
        return " ".join(map(str, found[0]))
    names = [cfn.CFN.wcsp.getName(i) for i in range(len(found[0]))]
    return "v " + " ".join(n if v else "-" + n for n, v in zip(names, found[0], strict=True))


def cbc(path: Path, tmp: Path) -> str | None:
    import cbcbox

    answer = tmp / "cbc.sol"
    subprocess.run(
        [cbcbox.cbc_bin_path(), str(path), "-sec", "60", "-solve", "-solu", str(answer)],
        capture_output=True,
        timeout=120,
    )
    text = answer.read_text()
    return None if "nfeasible" in text.splitlines()[0] else text


def instances(tmp_path: Path):
    """Tight and loose memory, forbidden picks (some unavoidable), never-live and
    isolated nodes (fewer edges than nodes)."""
    for seed in range(8):
        problem = generate(
            nodes=7, edges=4 + seed % 5, forbidden=0.1 * (seed % 3),
            tightness=(-0.1, 0.0, 0.2, 0.5)[seed % 4], idle=0.2, seed=seed,
        )  # fmt: skip
        yield seed, read_instance(write_problem(tmp_path / f"p{seed}.json", problem))


def round_trip(inst, fmt: str, presolve: bool, tmp: Path, solver=None) -> tuple | None:
    """(forbidden picks, cost) of the restored answer; None when the model has none."""
    try:
        model = reduce(inst, passes=presolve)
    except Infeasible:
        return None
    path = tmp / f"model.{fmt}"
    export(model, path, Header(fmt, presolve, fingerprint(model), "test"))
    assert read_header(path) == Header(fmt, presolve, fingerprint(model), "test")
    answer = outside(fmt, path, tmp) if solver is None else solver(path, tmp)
    if answer is None:
        return None
    ev = evaluate(inst, model.reconstruct(restore(model, fmt, answer)))
    assert ev.feasible
    return ev.forbidden, ev.cost


@pytest.mark.parametrize("presolve", [True, False])
@pytest.mark.parametrize("fmt", FORMATS)
def test_outside_solvers_reach_the_contest_optimum(tmp_path, fmt, presolve):
    answered = 0
    for _seed, inst in instances(tmp_path):
        expected = contest_optimum(inst)
        got = round_trip(inst, fmt, presolve, tmp_path)
        if got is None:  # no answer only where no clean assignment exists (hard forbidden)
            assert expected is None or expected[0] > 0
            continue
        assert got == expected
        answered += 1
    assert answered >= 4


@pytest.mark.parametrize("presolve", [True, False])
def test_cbc_on_the_mps_file_reaches_the_optimum(tmp_path, presolve):
    answered = 0
    for _seed, inst in instances(tmp_path):
        got = round_trip(inst, "mps", presolve, tmp_path, solver=cbc)
        expected = contest_optimum(inst)
        if got is None:  # no answer only where no clean assignment exists
            assert expected is None or expected[0] > 0
            continue
        assert got == expected
        answered += 1
    assert answered >= 4  # as its sibling: CBC itself answered


@pytest.fixture(scope="module")
def g_cut(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cut") / "g300.json.gz"
    source = BENCHMARKS / "asplos-2025-iopddl-G.json.gz"
    cmd = [BIN / "maxshard", "generate", path, "--from", source, "--nodes", "300", "--seed", "3"]
    subprocess.run(cmd, check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def g_cut_optimum(g_cut) -> int:
    from maxshard import solve

    result = solve(g_cut, timeout=60, backends=["toulbar2"])
    assert result.status == "optimal"
    return result.cost


def scip_opb(path: Path, tmp: Path) -> str | None:
    """SCIP reading the OPB file (toulbar2 finds no solution of this one in 30 s)."""
    import pyscipopt

    scip = pyscipopt.Model()
    scip.hideOutput()
    scip.readProblem(str(path))
    scip.setParam("limits/time", 60)
    scip.optimize()
    if scip.getStatus() != "optimal":
        return None
    best = scip.getBestSol()
    lits = [v.name if scip.getSolVal(best, v) > 0.5 else "-" + v.name for v in scip.getVars()]
    return "v " + " ".join(lits)


@pytest.mark.parametrize("presolve", [True, False])
@pytest.mark.parametrize("fmt", [*FORMATS, "mps-cbc"])
def test_a_300_node_cut_of_g_round_trips_in_every_format(
    tmp_path, g_cut, g_cut_optimum, fmt, presolve
):
    inst = read_instance(g_cut)
    solver = {"opb": scip_opb, "mps-cbc": cbc}.get(fmt)
    got = round_trip(inst, fmt.split("-")[0], presolve, tmp_path, solver=solver)
    assert got == (0, g_cut_optimum)


def test_export_and_restore_from_the_command_line(tmp_path):
    problem = generate(nodes=8, forbidden=0.0, tightness=0.1, functional=0.0, seed=2)
    path = write_problem(tmp_path / "p.json", problem)
    inst = read_instance(path)
    expected = contest_optimum(inst)
    cmd = [BIN / "maxshard", "export", path, tmp_path / "m.cfn"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("# wrote")
    answer = outside("cfn", tmp_path / "m.cfn", tmp_path)
    (tmp_path / "answer.txt").write_text(answer)
    out = subprocess.run(
        [BIN / "maxshard", "restore", path, tmp_path / "m.cfn", tmp_path / "answer.txt"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0
    lines = out.stdout.strip().splitlines()
    ev = evaluate(inst, json.loads(lines[-1]))
    assert ev.cost == expected[1]
    assert lines[0] == f"# cost {ev.cost}, fits in memory (peak {ev.peak})"


def restore_error(tmp_path, answer: str, model_file: Path | None = None, problem=None) -> str:
    out = subprocess.run(
        [BIN / "maxshard", "restore", problem, model_file, "-"],
        input=answer, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1
    return out.stderr


def test_restore_rejects_bad_answers_in_one_line(tmp_path):
    problem = generate(nodes=8, forbidden=0.0, tightness=0.0, functional=0.0, seed=4)
    path = write_problem(tmp_path / "p.json", problem)
    inst = read_instance(path)
    model = reduce(inst, passes=False)
    model_file = tmp_path / "m.wcnf"
    subprocess.run([BIN / "maxshard", "export", path, model_file, "--no-presolve"], check=True)
    nval = int(model.dom_off[-1])
    # malformed, incomplete (a variable without a value), two values for one variable
    assert "neither literals" in restore_error(tmp_path, "v 1 x -3\n", model_file, path)
    none = "v " + " ".join(f"-{i}" for i in range(1, nval + 1))
    assert "no value" in restore_error(tmp_path, none, model_file, path)
    assert "2 values" in restore_error(tmp_path, "v 1 2\n", model_file, path)
    assert "no 'v' line" in restore_error(tmp_path, "s UNKNOWN\n", model_file, path)
    # an answer that overflows memory: every variable at its largest usage
    heavy = [int(np.argmax(sum(model.usage_of(k) for k in np.flatnonzero(model.term_var == v))
                          if (model.term_var == v).any() else np.zeros(1)))
             for v in range(model.nv)]  # fmt: skip
    x = np.array(heavy)
    assert not model.fits(x)  # tight memory: the heaviest choice does not fit
    lits = [int(model.dom_off[v] + a + 1) for v, a in enumerate(heavy)]
    too_much = "v " + " ".join(map(str, lits))
    assert "does not fit in memory" in restore_error(tmp_path, too_much, model_file, path)
    # a model file of another problem, a file that is no model file
    other = write_problem(tmp_path / "q.json", generate(nodes=8, seed=9))
    assert "was not exported from" in restore_error(tmp_path, "v 1", model_file, other)
    assert "not a model file" in restore_error(tmp_path, "v 1", path, path)


def test_format_comes_from_the_suffix_or_the_option(tmp_path):
    assert format_of("a/b.WCNF") == "wcnf" and format_of("m.cfn.gz") == "cfn"
    assert format_of("m.txt", "opb") == "opb"
    with pytest.raises(FormatError, match="suffix"):
        format_of("m.txt")
    with pytest.raises(FormatError, match="unknown format"):
        format_of("m.txt", "xml")
    out = subprocess.run(
        [BIN / "maxshard", "export", BENCHMARKS / "example.json", tmp_path / "m.txt"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and "give --format" in out.stderr


def test_compressed_cfn_is_read_by_toulbar2(tmp_path):
    problem = generate(nodes=8, forbidden=0.0, tightness=0.1, functional=0.0, seed=6)
    inst = read_instance(write_problem(tmp_path / "p.json", problem))
    model = reduce(inst)
    export(model, tmp_path / "m.cfn.xz", Header("cfn", True, fingerprint(model), "t"))
    assert read_header(tmp_path / "m.cfn.xz").format == "cfn"
    answer = outside("cfn", tmp_path / "m.cfn.xz", tmp_path)
    ev = evaluate(inst, model.reconstruct(restore(model, "cfn", answer)))
    assert (ev.forbidden, ev.cost) == contest_optimum(inst)
