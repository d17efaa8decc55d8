"""PyTorch-module problems in KernelBench's format turned into fsr task folders (`fsr import`):
sizes (sizes.py), shapes and FLOPs probed on the meta device and checked test sizes (probe.py),
shape expressions fitted to observed extents (fit.py), the task planned and written (plan.py,
write.py), one file imported per child process (one.py), and the runtime that every generated
reference.py carries (runtime.py)."""

# The arguments' bytes a benchmark size may hold (scale.py says why); here so that the command line
# and the importing process read it without importing NumPy or torch.
DEFAULT_MAX_BENCH_BYTES = 4 * 2**30
