"""Turns on the GPU child: one holder at a time, re-entrant for its holder, and a certification
waiting goes before the candidates that were waiting longer."""

from __future__ import annotations

import threading
import time

from fsr.evaluate.turns import Turns


def waiter(turns: Turns, name: str, order: list[str], urgent: bool) -> threading.Thread:
    def run() -> None:
        if urgent:
            with turns.urgent():
                order.append(name)
        else:
            with turns:
                order.append(name)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.05)  # queued before the next one
    return thread


def test_a_certification_goes_before_candidates_waiting_longer() -> None:
    turns, order = Turns(), []
    with turns:
        threads = [waiter(turns, "candidate 1", order, False), waiter(turns, "candidate 2", order, False),
                   waiter(turns, "certification", order, True)]
        assert order == []  # nobody runs while the GPU is held
    for thread in threads:
        thread.join(5)
    assert order[0] == "certification" and sorted(order[1:]) == ["candidate 1", "candidate 2"]


def test_without_certifications_waiting_every_caller_gets_a_turn_and_the_holder_may_reenter() -> None:
    turns, order = Turns(), []
    with turns:
        with turns.urgent():  # the holder itself: no wait
            with turns:
                order.append("nested")
        threads = [waiter(turns, f"candidate {i}", order, False) for i in range(3)]
    for thread in threads:
        thread.join(5)
    assert order[0] == "nested" and sorted(order[1:]) == [f"candidate {i}" for i in range(3)]
