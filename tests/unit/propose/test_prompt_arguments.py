"""An imported task's prompt lists each argument once and states the benchmark size once; a
network too big for the budget has its weights and buffers summarised, step by step (grouped by
role and shape, then with each group's first and last name, then by role), until it fits, and
the prompt says what was cut. A network is made up here (no PyTorch): its task as `fsr import`
writes one, its state's module paths in reference.py's `_LAYOUT`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fsr.kernelbench.write import MARKER
from fsr.propose.base import ProposalRequest
from fsr.propose.imported import STEPS, description
from fsr.propose.prompt import build, estimate_tokens, system_prompt, task_variants
from fsr.testing.fakes import softmax_task
from fsr.types import Arg

STATE = [("conv1.weight", ("8", "3", "3", "3"))]
STATE += [(f"bn1.{p}", ("8",)) for p in ("weight", "bias", "running_mean", "running_var")]
for block in range(6):
    STATE += [(f"layer1.{block}.conv1.weight", ("8", "8", "3", "3"))]
    STATE += [(f"layer1.{block}.bn1.{p}", ("8",)) for p in ("weight", "bias", "running_mean", "running_var")]
STATE += [("layer2.0.conv1.weight", ("16", "8", "3", "3")), ("ln.weight", ("16",)), ("ln.bias", ("16",)),
          ("fc.weight", ("classes", "16")), ("fc.bias", ("classes",))]
NAMES = [path.replace(".", "_") for path, _ in STATE]
ARGS = (Arg("x", "float32", ("batch", "3", "side", "side"), "in"),
        *(Arg(n, "float32", shape, "in") for n, (_, shape) in zip(NAMES, STATE, strict=True)),
        Arg("out", "float32", ("batch", "classes"), "out"))
LISTING = "\n".join(f"  {a.intent:<3} {a.name}: {a.dtype}[{', '.join(a.shape)}]" for a in ARGS)
SOURCE = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    pass  # a made-up network\n"
DESCRIPTION = (f"KernelBench problem level3/99_Net.py: compute Model.forward of the PyTorch module below.\n"
               f"Arguments (shapes in the sizes; every weight and buffer of the module is an input named after "
               f"its module path):\n{LISTING}\n"
               "Benchmark size: batch = 64, side = 224, classes = 1000 (the file's own sizes, batch = 512, side = 224, "
               "classes = 1000, scaled down to fit a GPU's memory).\n\nThe module's source:\n\n" + SOURCE)
LAYOUT = {"inputs": ["x"], "constants": {}, "state": [[n, p] for n, (p, _) in zip(NAMES, STATE, strict=True)],
          "outputs": ["out"], "bools": []}
NET = replace(softmax_task(None), name="kb3_99_net", description=DESCRIPTION, args=ARGS,
              size_names=("batch", "side", "classes"), constants=(), test_sizes=((("batch", 2), ("side", 5), ("classes", 3)),),
              bench_size=(("batch", 64), ("side", 224), ("classes", 1000)),
              reference_source=f"{MARKER} from 99_Net.py.\n_LAYOUT = {LAYOUT!r}\n\n_SOURCE = {SOURCE!r}\n")


def first(budget: int = 16_000):
    return build(ProposalRequest(NET, ()), None, budget_tokens=budget)


def test_each_argument_and_the_benchmark_size_are_stated_once() -> None:
    prompt = first()
    user = prompt.messages[1][1]
    example = "`layer1.0.conv1.weight` is `layer1_0_conv1_weight`"  # how the names are made: the first deepest
    assert example in user
    for a in ARGS:
        assert user.replace(example, "").count(f"`{a.name}`") == 1, a.name
    assert user.count("batch=64,side=224,classes=1000") == 1 and "Benchmark size" not in user
    assert "Arguments (" not in user and "  in  conv1_weight" not in user
    assert "The file's own sizes, batch = 512, side = 224, classes = 1000, are scaled down to fit a GPU's memory." in user
    assert user.count("class Model(nn.Module)") == 1
    assert prompt.cuts == () and description(NET).count("\n") < DESCRIPTION.count("\n") - len(ARGS)


def budgets() -> list[int]:
    """The whole prompt's size with the task section at each step of STEPS."""
    rest = estimate_tokens(system_prompt()) + estimate_tokens(first().messages[1][1].split("# Now", 1)[1]) + 2
    return [rest + estimate_tokens(text) for text, _ in task_variants(NET)]


def test_the_steps_are_each_shorter_and_say_what_they_cut() -> None:
    sizes = budgets()
    assert len(sizes) == len(STEPS) and sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert [cut for _, cut in task_variants(NET)] == list(STEPS)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_a_network_over_budget_is_summarised_until_it_fits(step: int) -> None:
    prompt = first(budgets()[step])
    user = prompt.messages[1][1]
    assert prompt.tokens <= budgets()[step] and prompt.cuts == (f"task: {STEPS[step]}",)
    assert "`x`: float32[batch, 3, side, side], input (read-only)" in user and "`out`: float32[batch, classes], output" in user
    assert "- 1 x linear weight, float32[classes, 16]: `fc_weight`" in user
    assert "- 1 x norm bias, float32[16]: `ln_bias`" in user
    if step == 1:
        assert ("- 6 x conv weight, float32[8, 8, 3, 3]: " + ", ".join(f"`layer1_{b}_conv1_weight`" for b in range(6))
                in user)
        assert all(f"`{n}`" in user for n in NAMES)
    if step == 2:
        assert "- 6 x conv weight, float32[8, 8, 3, 3]: `layer1_0_conv1_weight`, ..., `layer1_5_conv1_weight`" in user
        assert "- 7 x batch-norm running_mean, float32[8]: `bn1_running_mean`, ..., `layer1_5_bn1_running_mean`" in user
    if step == 3:
        assert ("- 8 x conv weight, float32, 3 shapes from [8, 3, 3, 3] to [16, 8, 3, 3]: `conv1_weight`, ..., "
                "`layer2_0_conv1_weight`") in user


def test_below_the_last_step_the_task_is_sent_as_it_is() -> None:
    prompt = first(budgets()[-1] - 50)
    assert prompt.tokens > budgets()[-1] - 50 and prompt.cuts == (f"task: {STEPS[-1]}",)


def test_a_task_without_module_state_has_one_list() -> None:
    plain = replace(NET, reference_source=NET.reference_source.replace("'state': [", "'state': [] and ["))
    assert len(task_variants(plain)) == 1 and "Buffers (in argument order):\n- `x`" in task_variants(plain)[0][0]
