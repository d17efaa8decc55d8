"""Certification's program: a loaded candidate whose every launch sequence starts from a stricter
state than screening's (docs/judge.md, "Two tiers"). Besides the module-scope `__device__`
variables that every Program restores, its `__constant__` banks are given back the bytes the
loader wrote: a kernel cannot write a constant through its name, but it can through a generic
pointer laundered in inline asm, and keep there what an earlier launch found. And every SM's
shared memory and every thread slot's local frame are scrubbed (gpu.scrub), so no block finds
what an earlier launch left there.

Screening never builds one: the restore and the scrub cost certifications only.

Runs in the evaluator's child process only (imports cupy).
"""

from __future__ import annotations

import cupy as cp

from fsr.evaluate import device_globals
from fsr.evaluate.gpu import scrub
from fsr.evaluate.gpu.programs import Program


class CertifiedProgram(Program):
    """A Program whose `reset_globals` also restores its constant banks (one copy per bank, from
    an image taken right after the load) and scrubs shared and local memory (gpu.scrub). `unrestorable` names the banks fsr found no base for:
    certification refuses such a module rather than leave a bank unrestored."""

    def __init__(self, cubin: bytes, lowered: tuple[tuple[str, str], ...]):
        super().__init__(cubin, lowered)
        self.constants = device_globals.constants(cubin)
        self.unrestorable: list[str] = []
        self._banks: list[tuple[int, int, cp.ndarray]] = []  # (device address, bytes, image)
        for section in self.constants.sections:
            span = device_globals.bank_span(section, self._placed(section))
            if span is None:
                self.unrestorable.append(section.name)
                continue
            # the loader's bytes, not the cubin's: it fills in pointers (a __constant__ pointer
            # to another variable is 0 in the cubin)
            image = cp.empty(span.size, dtype=cp.uint8)
            cp.cuda.runtime.memcpyAsync(image.data.ptr, span.address, span.size,
                                        cp.cuda.runtime.memcpyDeviceToDevice, 0)
            self._banks.append((span.address, span.size, image))
        cp.cuda.Stream.null.synchronize()  # fsr's streams do not wait for the legacy default one
        self.local_bytes = self.resources().stack_bytes  # the frame the scrub must cover at least

    def _placed(self, section: device_globals.Section) -> dict[str, int]:
        placed = {}
        for sym in section.symbols:
            try:
                placed[sym.name] = int(cp.cuda.driver.moduleGetGlobal(self.module.ptr, sym.name))
            except cp.cuda.driver.CUDADriverError:  # not exported under that name
                continue
        return placed

    @property
    def constant_bytes(self) -> int:
        """Bytes of constant banks restored before each launch sequence."""
        return sum(size for _, size, _ in self._banks)

    def reset_globals(self, stream: cp.cuda.Stream) -> None:
        """Module-scope variables restored (Program's), every constant bank restored, then shared
        and local memory scrubbed."""
        super().reset_globals(stream)
        for address, size, image in self._banks:
            cp.cuda.runtime.memcpyAsync(address, image.data.ptr, size, cp.cuda.runtime.memcpyDeviceToDevice,
                                        stream.ptr)
        scrub.scrub(stream, self.local_bytes)
