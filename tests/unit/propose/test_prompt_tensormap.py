"""The prompt of a task on an sm_90 device shows how to ask for a tensor map, with an example
header that fsr itself accepts; devices without the tensor memory accelerator are not told."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace

import pytest

from fsr import candidate, tasks
from fsr.propose.base import ProposalRequest
from fsr.propose.prompt import build
from fsr.propose.render import fill
from fsr.types import DeviceInfo

GEMM = tasks.load("gemm_bf16")
DESCRIBED_DEVICE = DeviceInfo("NVIDIA H100 80GB HBM3", "sm_90", 132)  # an H100's name and arch


def user_message(device=DESCRIBED_DEVICE, task=GEMM) -> str:
    return build(ProposalRequest(task, ()), device).messages[1][1]


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_100"])
def test_a_device_with_the_copy_engine_gets_the_example_for_any_task(arch):
    for task in (GEMM, tasks.load("softmax")):
        user = user_message(replace(DESCRIBED_DEVICE, arch=arch), task)
        assert "[[tensormap]]" in user and "const __grid_constant__ CUtensorMap" in user
        assert "cp.async.bulk.tensor.2d" in user and 'when = "K % 8 == 0"' in user


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_a_device_without_it_is_not_told(arch):
    user = user_message(replace(DESCRIBED_DEVICE, arch=arch))
    assert "tensormap" not in user and "CUtensorMap" not in user


def test_the_example_header_is_one_fsr_accepts_with_a_fallback_at_unaligned_sizes():
    text = fill("tensormap.md")
    example = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    table = tomllib.loads(example)["tensormap"][0]
    header = example + f"""
[tunables]
BM = [64]
BN = [64]

[[launch]]
kernel = "gemm_tma"
when = "K % 8 == 0"
grid = ["cdiv(N, BN)", "cdiv(M, BM)"]
block = [256]
args = ["{table['name']}", "B", "C", "M", "N", "K"]

[[launch]]
kernel = "gemm_plain"
when = "K % 8 != 0"
grid = ["cdiv(N, BN)", "cdiv(M, BM)"]
block = [256]
args = ["A", "B", "C", "M", "N", "K"]
"""
    code = f"""/* fsr
{header}*/
#include <cuda_bf16.h>
extern "C" __global__ void gemm_tma(const __grid_constant__ CUtensorMap {table['name']}, const __nv_bfloat16* B,
                                    __nv_bfloat16* C, int M, int N, int K) {{}}
extern "C" __global__ void gemm_plain(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                                      int M, int N, int K) {{}}
"""
    cand = candidate.parse(code, GEMM)  # every test size of gemm_bf16, K = 1, 5 and 7 among them
    assert cand.tensormaps[0].swizzle == "128B" and cand.tensormaps[0].dims == ("K", "M")
    with pytest.raises(candidate.HeaderError, match="stride of dimension 1"):  # the `when` is what saves it
        candidate.parse(code.replace('when = "K % 8 == 0"\n', ""), GEMM)
