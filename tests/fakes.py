"""Backends that misbehave or cooperate on purpose, for the orchestrator's
tests: each is registered under its name by the ``fake_plugins`` fixture
(conftest.py), as an installed plugin would be."""

import time

import numpy as np

from maxshard import backend as backends
from maxshard.backend import Capabilities, Result, Status, context, shared_best
from maxshard.orchestrate import Best
from maxshard.orchestrate.workers import Bounded
from maxshard.reduce import reduce

from .conftest import generated


class Hang:
    name = "hang"
    capabilities = Capabilities(exact=False, anytime=False, memory=False, lower_bound=False)

    def solve(self, model, deadline, incumbent, report, seed=0):
        time.sleep(3600)


class Crash(Hang):
    name = "crash"

    def solve(self, model, deadline, incumbent, report, seed=0):
        raise RuntimeError("boom")


class Dies(Hang):
    """Its process ends without a result (as a segmentation fault would end it)."""

    name = "dies"

    def solve(self, model, deadline, incumbent, report, seed=0):
        import os

        os._exit(1)


class Optimal(Hang):
    name = "optimal"

    def solve(self, model, deadline, incumbent, report, seed=0):
        return Result(Status.OPTIMAL, incumbent, model.cost(incumbent))


class Bounding(Hang):
    name = "bounding"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(lower_bound=model.cost(incumbent) - 5)  # streamed, then a proof
        report(lower_bound=model.cost(incumbent))
        time.sleep(3600)


class Overbounding(Hang):
    """A broken backend: claims a bound above the incumbent's cost."""

    name = "overbounding"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(lower_bound=model.cost(incumbent) + 1)
        time.sleep(3600)


class Stale(Hang):
    """A broken backend: claims, late, that its start is optimal, after another
    worker has found better (as toulbar2 held to its backtrack limit did)."""

    name = "stale"

    def solve(self, model, deadline, incumbent, report, seed=0):
        time.sleep(1.0)
        return Result(Status.OPTIMAL, incumbent, model.cost(incumbent))


class Finder(Hang):
    """Improves the incumbent by a descent after a moment, reports it, and waits."""

    name = "finder"

    def solve(self, model, deadline, incumbent, report, seed=0):
        from maxshard.search.local import Search

        time.sleep(0.3)
        search = Search(model, seed)
        search.reset(incumbent)
        search.descend(deadline)
        report(search.x.copy())
        time.sleep(3600)


class Stateful(Hang):
    """Improves the incumbent and shares a state; a copy restarted from that state
    reports the bound written in it (so the test sees what was inherited)."""

    name = "stateful"

    def solve(self, model, deadline, incumbent, report, seed=0):
        inherited = backends.inherited_state(report)
        if inherited is not None:
            # less what the restarted worker had handed over as its own backend
            previous = backends.previous_state(report) or {"mark": 0}
            report(lower_bound=inherited["bound"] - previous["mark"])
        else:
            from maxshard.search.local import Search

            search = Search(model, seed)
            search.reset(incumbent)
            search.descend(deadline)
            report(search.x.copy())
            backends.share_state(report, {"bound": model.cost(search.x) - 7})
        time.sleep(3600)


class Marker(Hang):
    """Hands over a state of its own, then waits."""

    name = "marker"

    def solve(self, model, deadline, incumbent, report, seed=0):
        context(report).hand_over({"mark": 1})
        time.sleep(3600)


class Listener(Hang):
    """Waits for a better solution from another worker; proves its cost a bound."""

    name = "listener"

    def solve(self, model, deadline, incumbent, report, seed=0):
        start_cost = model.cost(incumbent)
        while time.monotonic() < deadline:
            x = context(report).best()
            if x is not None and model.cost(x) < start_cost:
                report(lower_bound=model.cost(x))
            time.sleep(0.01)
        return Result(Status.UNKNOWN)


class OldStyle(Hang):
    """A plugin written against the first interface: the helper functions on
    ``report`` (shared_best, share_state), no context. Tries every assignment."""

    name = "oldstyle"

    def solve(self, model, deadline, incumbent, report, seed=0):
        import itertools

        start = shared_best(report)  # the run's best in model form, if it has one
        best = start if start is not None and model.fits(start) else None
        for values in itertools.product(*(range(int(d)) for d in model.dom_size)):
            x = np.array(values, dtype=np.int64)
            if model.fits(x) and (best is None or model.cost(x) < model.cost(best)):
                best = x
        backends.share_state(report, {"done": True})
        report(best)
        return Result(Status.OPTIMAL, best, model.cost(best))


class Garbage(Hang):
    """Reports a solution that is not one (wrong length, then values out of the
    domains), then sends a message the orchestrator does not know."""

    name = "garbage"

    def solve(self, model, deadline, incumbent, report, seed=0):
        report(np.zeros(model.nv + 3, dtype=np.int64))
        report(np.asarray(model.dom_size, dtype=np.int64))  # one past every domain
        report.conn.send(("nonsense", 1, 2))
        report.conn.send(Bounded("no number", 0.0))  # a bound without its value
        time.sleep(3600)


PREPARED: list[int] = []  # pids of the processes a Preparer was prepared in


class Preparer(Hang):
    name = "preparer"

    def prepare(self):
        import os

        PREPARED.append(os.getpid())


class BadPreparer(Hang):
    name = "badpreparer"

    def prepare(self):
        raise RuntimeError("cannot prepare")


def started(tmp_path, log=lambda _m: None):
    """A small clean instance, its model, and a Best holding the model's
    least-usage solution (offered as "start"), which the tests' fakes improve on."""
    inst = generated(tmp_path, 4, nodes=40, tightness=0.3, forbidden=0.0, functional=0.0)
    model = reduce(inst)
    best = Best(inst, log)
    x = model.min_usage_solution()
    best.offer(model.reconstruct(x), "start", x)
    return inst, model, best, x


#: fake backends by the name they are registered under
FAKES = {
    "hang": "tests.fakes:Hang",
    "crash": "tests.fakes:Crash",
    "dies": "tests.fakes:Dies",
    "optimal": "tests.fakes:Optimal",
    "bounding": "tests.fakes:Bounding",
    "finder": "tests.fakes:Finder",
    "overbounding": "tests.fakes:Overbounding",
    "stale": "tests.fakes:Stale",
    "listener": "tests.fakes:Listener",
    "stateful": "tests.fakes:Stateful",
    "marker": "tests.fakes:Marker",
    "garbage": "tests.fakes:Garbage",
    "oldstyle": "tests.fakes:OldStyle",
    "preparer": "tests.fakes:Preparer",
    "badpreparer": "tests.fakes:BadPreparer",
}
