"""The lineage's Parquet schema, declared once: the evaluations and trials columns, their types and
nullability, and which columns make a row one evaluation (one tuning trial)."""

from __future__ import annotations

import pyarrow as pa

# Defines as an ordered list of (name, value) structs: reads back into a Defines tuple in one line,
# keeps declaration order, and every Parquet reader (pandas, DuckDB, polars) handles it well.
PAIRS = pa.list_(pa.struct([("name", pa.string()), ("value", pa.int64())]))
STRINGS = pa.list_(pa.string())
TS = pa.timestamp("us", tz="UTC")
F64, I32, I64, STR, BOOL = pa.float64(), pa.int32(), pa.int64(), pa.string(), pa.bool_()
CHECKS = pa.list_(pa.struct([("size", PAIRS), ("passed", pa.bool_()), ("max_abs_err", F64),
                             ("detail", STR)]))
TIMING_COLUMNS = ("median_us", "p10_us", "p90_us", "min_us", "samples_us", "gbps", "tflops",
                  "ceiling_fraction")
SCHEMA_META = {"fsr.schema_version": "1"}
MERGED_KEY = "fsr.merged_parts"  # JSON list of part names a compacted file already contains


def _schema(columns: list[tuple[str, pa.DataType, bool]]) -> pa.Schema:
    return pa.schema([pa.field(n, t, nullable=null) for n, t, null in columns], metadata=SCHEMA_META)


# Nullable (True) only where a value may be absent: timing of an untimed candidate, tokens of a
# hand-written one, timestamps the caller did not know.
EVALUATIONS = _schema([
    ("run_id", STR, False), ("candidate_id", STR, False), ("task", STR, False),
    ("parents", STRINGS, False), ("island", I32, False), ("generation", I32, False),
    ("proposer", STR, False), ("model", STR, False), ("move", STR, False),
    ("features_requested", STRINGS, False), ("features_detected", STRINGS, False),
    ("source", STR, False), ("defines", PAIRS, False), ("launches", STR, False),
    ("compile_options", STRINGS, False), ("verdict", STR, False), ("message", STR, False),
    ("checks", CHECKS, False),
    ("median_us", F64, True), ("p10_us", F64, True), ("p90_us", F64, True), ("min_us", F64, True),
    ("samples_us", pa.list_(F64), True), ("gbps", F64, True), ("tflops", F64, True),
    ("ceiling_fraction", F64, True), ("baseline_us", F64, True), ("library_us", F64, True),
    ("speedup", F64, True), ("registers", I32, False), ("spill_bytes", I64, False),
    ("smem_static_bytes", I64, False), ("stack_bytes", I64, False),
    ("tuned_defines", PAIRS, False), ("tune_trials", I32, False), ("device", STR, False),
    ("toolchain", STR, False), ("compile_s", F64, False), ("verify_s", F64, False),
    ("tune_s", F64, False), ("bench_s", F64, False), ("wall_s", F64, False),
    ("worker", STR, False), ("started_at", TS, True), ("finished_at", TS, False),
    ("prompt_tokens", I64, True), ("completion_tokens", I64, True), ("error", STR, True),
    ("setup_s", F64, True),  # null in lineages written before the column existed
    ("torch_us", F64, True),  # PyTorch eager; null without torch_eager, torch, or before the column
    ("torch_compile_us", F64, True),  # torch.compile of torch_eager; null where not timed
    ("torch_compile_s", F64, True),  # its compile time, once per GPU child and task
    ("comparators_s", F64, True),  # of setup_s, comparators timed beside candidates; null before the column
    ("diagnostics", STR, True),  # fsr.evaluate.diagnose's lines; null before the column existed
    ("dtype", STR, True),  # the task's dtype (its outputs'); null where unknown or before the column
    # The two tiers (docs/judge.md): null in lineages written before the columns, read as a screening
    # that was not cut short nor answered from an earlier judgement.
    ("tier", STR, True),  # "screen" or "certify"
    ("certified", BOOL, True),  # a certification row: passed or not; null on screening rows
    ("certifies", STR, True),  # a certification row: the screened candidate it re-judged
    ("failed_check", STR, True),  # a failed certification: the input set or check that failed
    ("cut_short", BOOL, True),  # its timing stopped early, its samples already clearly slower than the best
    ("answered_from", STR, True),  # answered from this earlier candidate's judgement (the same program)
    ("certify_seeds", PAIRS, True),  # a certification: (input set, seed) for each set it drew; null on screenings
    ("control_us", F64, True),  # a certification: its median on the screening's own sets, in the same load
])
TRIALS = _schema([
    ("run_id", STR, False), ("candidate_id", STR, False), ("trial", I32, False),
    ("defines", PAIRS, False), ("feasible", pa.bool_(), False), ("reason", STR, False),
    ("median_us", F64, True), ("cached", pa.bool_(), False), ("finished_at", TS, False),
])
SCHEMAS = {"evaluations": EVALUATIONS, "trials": TRIALS}
# What makes a row one evaluation (one tuning trial): rows equal in these columns are one row read
# twice (a part file copied, run directories merged), and `read` keeps the first. A candidate
# evaluated again (after a resume, `fsr eval --repeat`) finishes at another microsecond and takes
# another wall time, so it stays a row of its own.
IDENTITY = {"evaluations": ("run_id", "candidate_id", "worker", "started_at", "finished_at", "wall_s"),
            "trials": ("run_id", "candidate_id", "trial", "finished_at")}
