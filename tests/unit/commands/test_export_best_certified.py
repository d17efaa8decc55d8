"""best/<task>.cu holds the fastest certified kernel where the campaign certified, however fast an
uncertified one was screened; a campaign that did not certify exports its fastest screened one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fsr import certification, lineage
from fsr.candidate import export
from fsr.commands.run import _export_best
from fsr.testing.fakes import timing
from fsr.types import Tier, Verdict
from tests.support.lineage_writes import make_candidate, ok_evaluation


def campaign(run_dir: Path, certify: bool) -> tuple[str, str]:
    """A certified kernel at 10 us and one screened at 5 us whose certification failed; the
    exported texts of the two."""
    honest, cheat = make_candidate(1), make_candidate(2)
    with lineage.LineageWriter(run_dir) as w:
        for cand, us in ((honest, 10.0), (cheat, 5.0)):
            w.append(cand, replace(ok_evaluation(cand), timing=timing(us), tuned_defines=()))
        w.append(request := certification.request(honest, ok_evaluation(honest)),
                 replace(ok_evaluation(request), tier=Tier.CERTIFY, certified=True))
        w.append(request := certification.request(cheat, ok_evaluation(cheat)),
                 certification.failure(replace(ok_evaluation(request), tier=Tier.CERTIFY), "fresh inputs at rows=7",
                                       "3 of 231 elements wrong", Verdict.WRONG))
    (run_dir / "run.json").write_text(json.dumps({"config": {"eval": {"certify": certify}}, "tasks": ["softmax"]}))
    return (export(honest, honest.resolved_defines()), export(cheat, cheat.resolved_defines()))


@pytest.mark.parametrize("certify", [True, False])
def test_best_is_the_fastest_certified_kernel_where_the_campaign_certified(tmp_path: Path, certify: bool) -> None:
    honest, cheat = campaign(tmp_path, certify)
    _export_best(tmp_path)
    assert (tmp_path / "best" / "softmax.cu").read_text() == (honest if certify else cheat)
