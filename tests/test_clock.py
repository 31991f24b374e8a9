"""The time budget counts from the process start, but not a shell's time before an exec."""

import subprocess
import sys
import time

from maxshard import clock


def test_age_counts_start_up_but_not_more_than_startup_max(monkeypatch):
    monkeypatch.setattr(clock, "kernel_age", lambda: 50.0)  # exec'd into an old shell
    assert clock.process_age() <= time.monotonic() - clock.IMPORTED + clock.STARTUP_MAX + 1e-6
    monkeypatch.setattr(clock, "kernel_age", lambda: 0.0)
    before = time.monotonic() - clock.IMPORTED
    assert clock.process_age() >= before


def test_a_shell_that_execs_the_solver_does_not_eat_its_budget(tmp_path):
    # bash runs its last command in its own process: the 3 s sleep is the shell's
    script = (
        f"sleep 3; exec {sys.executable} -c "
        "'from maxshard.clock import deadline_for; import time; "
        "print(deadline_for(5.0) - time.monotonic())'"
    )
    left = float(
        subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    )
    assert 2.5 < left < 5.0
