"""A bad configuration costs that configuration, not the candidate, without a GPU: the parent's
retries against a fake child that hangs or dies in one configuration, the notes that name it,
the trial deadline, and the tuning that answers a configuration known to fail without running
it (or finds one wrong in a timed run) and goes on with the others."""

from __future__ import annotations

import types

from fsr.evaluate import configurations as cfg
from fsr.evaluate.device_globals import ModuleGlobals
from fsr.evaluate.wire import ChildResult, Died, TimedOut
from fsr.types import SizeCheck, Verdict
from tests.support.paths import ADVERSARIAL

OK = ChildResult(Verdict.OK)


def test_notes_name_the_configuration_they_run():
    assert cfg.running(cfg.TRIAL + cfg.label({"BLOCK": 1024, "TM": 4})) == (("BLOCK", 1024), ("TM", 4))
    assert cfg.running(cfg.TUNED + "BLOCK=512") == (("BLOCK", 512),)
    assert cfg.running("checks of the baseline") is None
    assert cfg.running(cfg.TRIAL) is None and cfg.running(cfg.TRIAL + "BLOCK=big") is None


def test_a_hang_or_death_in_a_configuration_is_that_configurations_failure():
    values, reason = cfg.failure(TimedOut(2.1, cfg.TRIAL + "BLOCK=1024"))
    assert values == (("BLOCK", 1024),) and reason.startswith("TIMEOUT") and "2.1 s" in reason
    died = Died(f"the kernel broke the CUDA context: illegal address (during {cfg.TUNED}BLOCK=256)")
    values, reason = cfg.failure(died)
    assert values == (("BLOCK", 256),) and reason.startswith("CRASH") and "illegal address" in reason
    assert cfg.failure(TimedOut(30.0, "checks of the candidate")) is None  # the candidate's own
    assert cfg.failure(Died("the GPU child died (exit code 9)")) is None
    assert cfg.failure(OK) is None


class FakeChild:
    """Hangs in every configuration of `hangs` the request does not list as failed, in order."""

    def __init__(self, hangs: list[int]):
        self.hangs, self.requests = hangs, []

    def __call__(self, failed):
        self.requests.append(failed)
        listed = {dict(values)["BLOCK"] for values, _ in failed}
        for block in self.hangs:
            if block not in listed:
                return TimedOut(2.0, cfg.TRIAL + f"BLOCK={block}")
        return OK


def test_a_configuration_that_hangs_is_recorded_and_the_request_sent_again_without_it():
    child = FakeChild([1024])
    reply, failed = cfg.with_retries(child, {"BLOCK"})
    assert reply == OK and len(child.requests) == 2 and child.requests[0] == ()
    assert failed == (((("BLOCK", 1024),), failed[0][1]),) and failed[0][1].startswith("TIMEOUT")
    assert child.requests[1] == failed
    assert "BLOCK=1024: TIMEOUT" in cfg.summary(failed)


def test_failures_stop_after_the_bound_and_the_last_is_the_candidates():
    child = FakeChild([1, 2, 3, 4, 5, 6, 7])
    reply, failed = cfg.with_retries(child, {"BLOCK"})
    assert isinstance(reply, TimedOut) and len(failed) == cfg.MAX_FAILED == len(child.requests) - 1


def test_a_configuration_that_fails_again_although_listed_ends_the_retries():
    calls = []

    def child(failed):
        calls.append(failed)
        return TimedOut(2.0, cfg.TUNED + "BLOCK=512")  # e.g. the full check of the only other value

    reply, failed = cfg.with_retries(child, {"BLOCK"})
    assert isinstance(reply, TimedOut) and len(calls) == 2 and len(failed) == 1


def test_without_tunables_or_outside_a_configuration_the_failure_is_the_candidates():
    assert cfg.with_retries(FakeChild([1024]), set())[1] == ()
    calls = []

    def child(failed):
        calls.append(failed)
        return TimedOut(30.0, "")

    assert isinstance(cfg.with_retries(child, {"BLOCK"})[0], TimedOut) and len(calls) == 1


def test_a_trials_deadline_is_a_small_multiple_of_the_best_trial_with_a_floor():
    assert cfg.trial_deadline_s(None) == cfg.FIRST_TRIAL_DEADLINE_S
    assert cfg.trial_deadline_s(0.01) == cfg.TRIAL_DEADLINE_FLOOR_S
    assert cfg.trial_deadline_s(1.0) == cfg.TRIAL_DEADLINE_MULTIPLE * 1.0


# -- the tuning's side, on a fake TrialBench (softmax-like: one tunable) --------------------------
class Bench:
    def __init__(self, wrong_timed: set[int]):
        self.wrong_timed, self.notes, self.timed = wrong_timed, [], []

    def compile(self, trial):
        raise AssertionError("programs are faked")

    def check(self, trial, program, index):
        return SizeCheck((), True)

    def time(self, trial, program, best_us):
        block = dict(trial.resolved_defines())["BLOCK"]
        self.timed.append(block)
        failed = SizeCheck((("rows", 8192),), False, 0.0, "in timed run 2 (input set 1), 9 of 9 wrong")
        return [1000.0 / block], failed if block in self.wrong_timed else None

    def note(self, text, deadline_s=None):
        self.notes.append((text, deadline_s))


def tune(monkeypatch, bench, failed=()):
    from fsr import candidate as cfmt
    from fsr import tasks
    from fsr.config import TuneConfig
    from fsr.evaluate.gpu import tuning
    from fsr.evaluate.wire import EvalRequest

    task = tasks.load("softmax")
    cand = cfmt.parse((ADVERSARIAL / "tuning/softmax/hang_at_1024.cu").read_text(), task)
    program = types.SimpleNamespace(globals=ModuleGlobals(), unresettable=[])
    monkeypatch.setattr(tuning, "Program", lambda cubin, lowered: program)
    monkeypatch.setattr(tuning.Trials, "program", lambda self, trial: program)
    monkeypatch.setattr(tuning.Trials, "prefetch", lambda self, points: None)
    monkeypatch.setattr(tuning.Trials, "winner", lambda self, key: (program, None))
    return tuning.run(bench, task, cand, EvalRequest(cand, b"", (), tune_trials=8, failed=failed), TuneConfig())


def test_a_configuration_known_to_fail_is_answered_without_running_and_tuning_goes_on(monkeypatch):
    bench = Bench(set())
    tuned = tune(monkeypatch, bench, failed=(((("BLOCK", 1024),), "TIMEOUT: still running after 2.0 s"),))
    assert 1024 not in bench.timed and sorted(bench.timed) == [256, 512]
    bad = [t for t in tuned.trials if dict(t.values)["BLOCK"] == 1024]
    assert bad and not bad[0].feasible and bad[0].reason.startswith("TIMEOUT") and not bad[0].cached
    assert [dict(o.candidate.resolved_defines())["BLOCK"] for o in tuned.options] == [512, 256]


def test_each_trials_device_part_runs_under_a_deadline_from_the_best_so_far(monkeypatch):
    bench = Bench(set())
    tune(monkeypatch, bench)
    deadlines = [d for text, d in bench.notes if d is not None]
    assert len(deadlines) == 3 and deadlines[0] == cfg.FIRST_TRIAL_DEADLINE_S
    assert all(cfg.TRIAL_DEADLINE_FLOOR_S <= d < cfg.FIRST_TRIAL_DEADLINE_S for d in deadlines[1:])
    assert all(text.startswith(cfg.TRIAL) for text, _ in bench.notes)


def test_a_trial_wrong_in_a_timed_run_is_infeasible_and_never_an_option(monkeypatch):
    bench = Bench({1024})
    tuned = tune(monkeypatch, bench)
    bad = [t for t in tuned.trials if dict(t.values)["BLOCK"] == 1024]
    assert bad and not bad[0].feasible and bad[0].reason.startswith("wrong in a timed run")
    assert all(dict(o.candidate.resolved_defines())["BLOCK"] != 1024 for o in tuned.options)


def test_a_known_failure_is_found_whatever_the_order_of_names():
    failed = (((("TM", 4), ("BLOCK", 1024)), "TIMEOUT: x"),)
    assert cfg.known_failure((("BLOCK", 1024), ("TM", 4)), failed) == "TIMEOUT: x"
    assert cfg.known_failure((("BLOCK", 512), ("TM", 4)), failed) is None


def test_the_verdict_message_lists_every_failed_configuration_once():
    from fsr.evaluate.configurations import noting
    from fsr.types import Evaluation

    block_1024, block_256 = (("BLOCK", 1024),), (("BLOCK", 256),)
    parent = ((block_1024, "TIMEOUT: still running after 2.0 s"),)
    child_side = cfg.summary(((block_256, "WRONG in the full check: at rows=4096: 3 of 9 wrong"),))
    result = noting(Evaluation("c", "softmax", Verdict.OK, message=child_side), parent)
    assert result.message.count(cfg.FAILED) == 1
    assert "BLOCK=1024: TIMEOUT" in result.message and "BLOCK=256: WRONG in the full check" in result.message
    wrong = noting(Evaluation("c", "softmax", Verdict.WRONG, message="at n=1: 1 of 1 wrong"), parent)
    assert wrong.message.startswith("at n=1") and "BLOCK=1024: TIMEOUT" in wrong.message
    assert noting(Evaluation("c", "softmax", Verdict.OK), ()).message == ""
