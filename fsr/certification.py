"""Certification's rules that need no GPU (docs/judge.md, "Two tiers"): what a certification
request is, when a certified time is clearly slower than the screened one, what the proposer is
told of a failed certification, which lineage rows count where a campaign certifies, and the
names of its input sets with the inputs a recorded seed rebuilds (the lineage's `certify_seeds`).

The search loop, the evaluators (real and fake) and the commands that read a lineage (`fsr bench`,
best/) share these, so a result counts by one rule everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from fsr import tasks
from fsr.config import certify_mode
from fsr.types import Candidate, Evaluation, Size, Stress, Task, Tier, Verdict, size_label

if TYPE_CHECKING:
    import pandas

# The timing check: a certified median (fresh inputs) more than SLOWER past the screened 90th
# percentile fails: the screened samples' own spread is in their p90, so an honest kernel timed again
# on inputs of the same distribution lands at or below it, and 3% more covers run-to-run drift; a
# kernel that gained on fsr's predictable inputs more than that fails, one that gained less is held
# to the bound (certified no faster than an honest twin beyond 3%). But a task's best is the
# least of many screened medians, timed minutes earlier, and on H200s that bound alone failed 2 of
# 66 bests of the built-in templates (histogram and nbody). So the certification also times the same
# load on the screening's own benchmark sets right after the fresh set, with the same flush (its
# `control_us`): a kernel past the screened p90 fails only if it is past that control by SLOWER
# too, i.e. also slower on fresh inputs than on the screening's at the same moment. The pair
# excuses, it never convicts alone: on a shared H200 an honest histogram read 20.6% slower on its
# fresh set than on the screening's in one certification, most likely its draw (histogram's hot
# band, clipped at an end in about one draw of ten, piled a quarter of the values on one bin; its
# inputs keep the band inside since).
SLOWER = 1.03
# However paired, a certified median this far past the screened p90 fails: the kernel was faster
# when screened than it is on any set now. (So a certification fails only where the unpaired
# bound would fail it too.)
DRIFT = 1.10
TIMING = "timing"
BENCH_SET = "timed runs on fresh inputs"  # the benchmark set's name, and the check that fails on it
CONTROL_SET = "timed runs on the screening inputs"  # the timing check's pair, checked as the fresh set is
Row = TypeVar("Row", bound=Mapping[str, Any])


def shortcut_words(cut_short: int, answered_from: int) -> str:
    """Screening's shortcuts in words, for the report and the live view: "12 cut short, 3
    answered from earlier judgements", naming only what is not zero."""
    parts = [f"{cut_short} cut short"] if cut_short else []
    if answered_from:
        parts.append(f"{answered_from} answered from "
                     + ("an earlier judgement" if answered_from == 1 else "earlier judgements"))
    return ", ".join(parts)


def request(candidate: Candidate, screened: Evaluation) -> Candidate:
    """The certification request of a screened OK candidate: the same kernel at the defines its
    tuning chose, naming the candidate it certifies (its own id, as Candidate.id says)."""
    defines = tuple(sorted(dict(screened.tuned_defines).items())) if screened.tuned_defines else candidate.defines
    return replace(candidate, defines=defines, certify=candidate.id)


def slower(screened: Evaluation, certified: Evaluation) -> str | None:
    """Why `certified`'s median is clearly slower than it was screened, or None: past the screened
    90th percentile by more than SLOWER and, where it has a control (the same load timed on the
    screening's sets right after), past that by SLOWER too; or past the screened p90 by more than
    DRIFT. None where either was not timed."""
    if screened.timing is None or certified.timing is None:
        return None
    s, c, control = screened.timing, certified.timing.median_us, certified.control_us
    screened_us = max(s.p90_us, s.median_us)
    if control and c > screened_us * DRIFT:
        return (f"certified median {c:.4g} us is {c / screened_us - 1:.0%} past the screened 90th percentile "
                f"{s.p90_us:.4g} us (median {s.median_us:.4g} us; bound {DRIFT - 1:.0%}), with {control:.4g} us on "
                f"fsr's screening inputs timed right after in the same load: it was faster when screened than it is now")
    if c <= screened_us * SLOWER:
        return None
    if control is None:
        return (f"certified median {c:.4g} us on fresh inputs is past the screened 90th percentile "
                f"{s.p90_us:.4g} us (median {s.median_us:.4g} us) by more than {SLOWER - 1:.0%}: the kernel was "
                f"faster on fsr's screening inputs than on inputs it could not predict")
    if c <= control * SLOWER:
        return None
    return (f"certified median {c:.4g} us on fresh inputs is past the screened 90th percentile {s.p90_us:.4g} us "
            f"and its median {control:.4g} us on fsr's screening inputs, timed right after in the same load, by "
            f"more than {SLOWER - 1:.0%}: the kernel is faster on inputs it could predict than on inputs it "
            f"could not")


def judge(screened: Evaluation, certified: Evaluation) -> Evaluation:
    """`certified` with the timing bound applied: UNCERTIFIED ("timing") where it is clearly
    slower than it was screened, else as it came."""
    if certified.verdict != Verdict.OK:
        return certified
    reason = slower(screened, certified)
    if reason is None:
        return replace(certified, certified=True)
    return replace(certified, verdict=Verdict.UNCERTIFIED, certified=False, failed_check=TIMING,
                   message=f"certification failed at {TIMING}: {reason}")


def as_certification(request: Candidate, evaluation: Evaluation) -> Evaluation:
    """An executor's answer to a certification request as a certification: the CRASH or TIMEOUT
    an executor gives for a request whose workers were lost under it becomes UNCERTIFIED."""
    if evaluation.tier == Tier.CERTIFY or not request.certify:
        return evaluation
    if evaluation.verdict == Verdict.OK:
        return replace(evaluation, tier=Tier.CERTIFY, certified=True)
    return failure(replace(evaluation, tier=Tier.CERTIFY), str(evaluation.verdict).lower(), evaluation.message,
                   evaluation.verdict)


def feedback(candidate: Candidate, certified: Evaluation) -> Evaluation:
    """What the proposer is told of `candidate` (the screened one) after its certification
    failed: a correctness failure whose message names the set or check."""
    return replace(certified, candidate_id=candidate.id, timing=None)


def failure(base: Evaluation, check: str, detail: str, verdict: Verdict | str = Verdict.UNCERTIFIED) -> Evaluation:
    """A failed certification: `base` (tier CERTIFY) with its verdict UNCERTIFIED, the set or
    check that failed, and a message saying what happened there (`verdict`: what it would have
    been in screening)."""
    message = f"certification failed at {check} ({verdict}): {detail}" if verdict != Verdict.UNCERTIFIED \
        else f"certification failed at {check}: {detail}"
    return replace(base, verdict=Verdict.UNCERTIFIED, tier=Tier.CERTIFY, certified=False, failed_check=check,
                   message=message, timing=None)


# ---- input sets and their seeds ---------------------------------------------------------------

def test_set(size: Size) -> str:
    """The name of certification's fresh inputs at a test size (its `failed_check` if wrong there)."""
    return f"fresh inputs at {size_label(size)}"


def stress_set(stress: Stress) -> str:
    """The name of a stress set's inputs in certification (its `failed_check` if wrong there)."""
    return f"stress set {stress.name} at {size_label(stress.size)}"


def input_sets(task: Task) -> dict[str, tuple[Size, Stress | None]]:
    """Every input set a certification of `task` draws, by name: its size, and its stress set."""
    sets: dict[str, tuple[Size, Stress | None]] = {test_set(size): (size, None) for size in task.test_sizes}
    sets.update({stress_set(s): (s.size, s) for s in task.stress})
    sets[BENCH_SET] = (task.bench_size, None)
    return sets


def set_inputs(task: Task, name: str, seed: int) -> dict[str, Any]:
    """The inputs (NumPy arrays, on the host) that certification's set `name` held when drawn from
    `seed` (a pair of the lineage's `certify_seeds`): the task's make_inputs at the set's size, its
    generator `numpy.random.default_rng(seed)`, a stress set's inputs mapped as declared. Raises
    KeyError for a name the task has no set of."""
    import numpy as np

    size, stress = input_sets(task)[name]
    module, rng = tasks.functions(task), np.random.default_rng(seed)
    if stress is not None:
        return tasks.stress_inputs(task, module, stress, rng)
    return dict(module.make_inputs(dict(size), rng))


# ---- lineage rows that count ------------------------------------------------------------------

def certifying(recorded: Mapping[str, Any]) -> bool:
    """Whether the campaign of this run.json certified its results (older runs did not): its
    `eval.certify` is a mode other than "off" (or true, from before the modes)."""
    return certify_mode(((recorded.get("config") or {}).get("eval") or {}).get("certify", False)) != "off"


def certified_ids(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The screened candidates that a passing certification row names."""
    return {r["certifies"] for r in rows if r.get("tier") == Tier.CERTIFY and r.get("certified") and r.get("certifies")}


def screenings(rows: Iterable[Row]) -> list[Row]:
    """The rows that are evaluations of candidates: certification rows are not."""
    return [r for r in rows if (r.get("tier") or Tier.SCREEN) != Tier.CERTIFY]


def certified_medians(frame: pandas.DataFrame) -> dict[str, tuple[float, float]]:
    """Per task, the kernel a table ranks first (`counted`'s fastest: the certified candidate with
    the smallest screened median) as (its screened median, its certification's median), from the
    lineage's rows, certification rows included; tasks with none are left out. A table reports
    the screened median; the other is the same kernel timed again, in a fresh load on fresh inputs
    under certification's flush, apart from the many screenings its screened median was the least of."""
    return {task: (screened, certified) for task, (screened, certified, _) in certified_timings(frame).items()}


def certified_timings(frame: pandas.DataFrame) -> dict[str, tuple[float, float, float | None]]:
    """`certified_medians` with the certification's control besides: its median on the screening's
    own sets, timed right after the fresh set in the same load (None before the column, or where
    the certification had none)."""
    if frame.empty or not {"tier", "certified", "certifies", "candidate_id", "verdict", "median_us"} <= set(frame):
        return {}  # a lineage from before certification, or a frame of fewer columns: nothing to say
    tiers = frame["tier"].fillna(Tier.SCREEN.value)
    passed = frame[(tiers == Tier.CERTIFY.value) & frame["certified"].eq(True) & frame["median_us"].notna()]
    controls = passed["control_us"] if "control_us" in passed else [None] * len(passed)
    again = {cid: (float(us), None if control is None or control != control else float(control))  # NaN: none
             for cid, us, control in zip(passed["certifies"], passed["median_us"], controls, strict=True)}
    ok = frame[(tiers != Tier.CERTIFY.value) & (frame["verdict"] == Verdict.OK.value)
               & frame["candidate_id"].isin(list(again)) & frame["median_us"].notna()]
    if ok.empty:
        return {}
    best = ok.loc[ok.groupby("task")["median_us"].idxmin()]
    return {str(task): (float(us), *again[cid])
            for task, cid, us in zip(best["task"], best["candidate_id"], best["median_us"], strict=True)}


def counted(frame: pandas.DataFrame, certifies: bool) -> pandas.DataFrame:
    """The lineage rows a table ranks (`fsr bench`): the screenings, and where the campaign
    certifies, an OK screening's latency only if its candidate was certified (the latency of one
    never certified is dropped: it is no result, though it stays an evaluation with its verdict)."""
    import numpy as np

    tiers = frame["tier"].fillna(Tier.SCREEN.value) if "tier" in frame else None
    screened = frame if tiers is None else frame[tiers != Tier.CERTIFY.value]
    if not certifies or tiers is None:
        return screened
    passed = certified_ids(frame[tiers == Tier.CERTIFY.value].to_dict("records"))
    out = screened.copy()
    out.loc[(out["verdict"] == Verdict.OK.value) & ~out["candidate_id"].isin(passed), "median_us"] = np.nan
    return out
