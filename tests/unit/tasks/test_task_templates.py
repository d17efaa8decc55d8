"""A task that names another task's template in task.toml (`template = { task, defines }`): what it
resolves to, that its content hash covers the template's text and the defines wherever the file
lives, that the built-in variants are their family's one file with a define, that a header's
`#if COND: KEY = VALUE` lines give a variant its own launches and switches, and that every bad
declaration is refused in one line naming the file. No GPU."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from fsr import candidate, cli, task_templates, tasks
from fsr.propose.base import ProposalRequest, Scored
from fsr.propose.features import detect
from fsr.propose.mutate import MutateProposer
from fsr.search.state import seed_candidates
from tests.support.cli import assert_one_line, run_main

BUILTIN = Path(tasks.DEFAULT_TASKS_DIR)
VARIANTS = {"attention_bf16_causal": ("attention_bf16", "CAUSAL"), "softmax_bf16": ("softmax", "BF16"),
            "rmsnorm_bf16": ("rmsnorm", "BF16"), "gemm_bf16_gelu": ("gemm_bf16", "GELU")}
HEADER_IF = re.compile(r"(?m)^#if [^:\n]*:.*\n")  # a header's `#if COND: KEY = VALUE` line


def without_header_ifs(text: str) -> str:
    """`text` with its header's `#if COND: KEY = VALUE` lines left out (what a family's own task sees)."""
    end = text.index("*/")
    return HEADER_IF.sub("", text[:end]) + text[end:]


@pytest.fixture
def family(tmp_path: Path) -> Path:
    """Copies of softmax and softmax_bf16 side by side, to change."""
    for name in ("softmax", "softmax_bf16"):
        shutil.copytree(BUILTIN / name, tmp_path / name)
    return tmp_path


def declare(folder: Path, line: str) -> None:
    """Replace the `template = ...` line of folder's task.toml (or add one before its tables)."""
    toml = folder / "task.toml"
    text = toml.read_text()
    if re.search(r"^template = .*$", text, re.M):
        text = re.sub(r"^template = .*$", line.replace("\\", "\\\\"), text, count=1, flags=re.M)
    else:
        at = text.index("\n[")
        text = text[:at] + "\n" + line + text[at:]
    toml.write_text(text)


def refused(folder: Path) -> str:
    """The one-line TaskError that loading `folder` raises."""
    with pytest.raises(tasks.TaskError) as e:
        tasks.load(folder)
    message = str(e.value)
    assert "\n" not in message and str(folder / "task.toml") in message, message
    return message


@pytest.mark.parametrize("name", VARIANTS)
def test_a_builtin_variant_is_its_familys_template_with_its_define(name):
    base, define = VARIANTS[name]
    variant, family_task = tasks.load(name), tasks.load(base)
    own = (BUILTIN / base / "template.cu").read_text()
    assert not (BUILTIN / name / "template.cu").exists()  # the fork is gone
    assert family_task.template_source == without_header_ifs(own)  # the family's own task: the file as it is
    header_end = own.index("*/") + 2
    line = f"\n#define {define} 1  // {name}'s define (its task.toml names this template)"
    if without_header_ifs(own) == own:
        assert variant.template_source == own[:header_end] + line + own[header_end:]
    assert line + own[header_end:] in variant.template_source  # the code, the define before it
    assert variant.template_where == f"{BUILTIN / base / 'template.cu'} with {define}=1"
    parsed = candidate.parse(variant.template_source, variant)
    assert define not in {t.name for t in parsed.tunables + parsed.features}  # fixed, never searched


def test_the_content_hash_covers_the_named_template_and_the_defines(family):
    before = tasks.load(family / "softmax_bf16")
    own_before = tasks.load(family / "softmax").content_hash
    template = family / "softmax" / "template.cu"
    template.write_text(template.read_text() + "// one more line\n")
    after = tasks.load(family / "softmax_bf16")
    assert after.content_hash != before.content_hash and after.template_source.endswith("// one more line\n")
    assert tasks.load(family / "softmax").content_hash != own_before
    declare(family / "softmax_bf16", 'template = { task = "softmax", defines = { BF16 = 1, FAST_MATH_X = 1 } }')
    template.write_text(template.read_text() + "#if FAST_MATH_X\n#endif\n")
    more = tasks.load(family / "softmax_bf16")
    assert "#define FAST_MATH_X 1" in more.template_source and more.content_hash != after.content_hash


def test_the_hash_is_the_resolved_text_not_where_the_file_lies(family, tmp_path):
    """Two folders with the same task.toml, reference and named template text hash alike."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(family, elsewhere)
    assert tasks.load(family / "softmax_bf16").content_hash == tasks.load(elsewhere / "softmax_bf16").content_hash


def test_a_variant_beside_no_family_names_the_builtin_task(tmp_path):
    shutil.copytree(BUILTIN / "softmax_bf16", tmp_path / "mine")
    task = tasks.load(tmp_path / "mine")
    assert task.template_source == tasks.load("softmax_bf16").template_source
    assert task.template_where.startswith(str(BUILTIN / "softmax" / "template.cu"))


def test_a_chain_of_names_applies_every_define_the_nearer_winning(family):
    shutil.copytree(family / "softmax_bf16", family / "again")
    declare(family / "again", 'template = { task = "softmax_bf16" }')
    chained = tasks.load(family / "again")
    assert chained.template_source == tasks.load(family / "softmax_bf16").template_source
    declare(family / "again", 'template = { task = "softmax_bf16", defines = { BF16 = 0 } }')
    assert "#define BF16 0  //" in tasks.load(family / "again").template_source


@pytest.mark.parametrize(("line", "said"), [
    ('template = { task = "nope", defines = { BF16 = 1 } }', "template names task 'nope', which is not in"),
    ('template = { task = "softmax", defines = { BF17 = 1 } }', "define BF17 is not tested by softmax's template"),
    ('template = { task = "softmax", defines = { BLOCK = 64 } }', "define BLOCK is a tunable or switch"),
    ('template = { task = "softmax", defines = { VEC4 = 1 } }', "define VEC4 is a tunable or switch"),
    ('template = { task = "softmax", defines = { BF16 = "yes" } }', "BF16 = 'yes' must be an identifier set to an integer"),
    ('template = { task = "softmax", defines = { BF16 = true } }', "BF16 = True must be an identifier set to an integer"),
    ('template = { task = "softmax", defines = { BF16 = 1.5 } }', "must be an identifier set to an integer"),
    ('template = { task = "softmax", defines = [1] }', "template.defines must be a table"),
    ('template = { task = "softmax", define = { BF16 = 1 } }', "unknown key(s) define"),
    ('template = "softmax"', "template must be a table"),
    ('template = { defines = { BF16 = 1 } }', "template.task must be the name of a task"),
    ('template = { task = "../softmax" }', "template.task must be the name of a task"),
    ('template = { task = "softmax_bf16" }', "cycle: softmax_bf16 -> softmax_bf16"),
])
def test_a_bad_declaration_is_refused_in_one_line(family, line, said):
    declare(family / "softmax_bf16", line)
    assert said in refused(family / "softmax_bf16")


def test_a_cycle_through_two_tasks_is_refused(family):
    declare(family / "softmax", 'template = { task = "softmax_bf16" }')
    (family / "softmax" / "template.cu").unlink()
    assert "cycle: softmax_bf16 -> softmax -> softmax_bf16" in refused(family / "softmax_bf16")


def test_a_template_file_and_a_declaration_together_are_refused(family):
    shutil.copy(family / "softmax" / "template.cu", family / "softmax_bf16" / "template.cu")
    assert "both template.cu and a `template`" in refused(family / "softmax_bf16")


def test_a_named_task_without_a_template_is_refused(family):
    (family / "softmax" / "template.cu").unlink()
    assert "task 'softmax'" in refused(family / "softmax_bf16") and "has no template.cu" in refused(family / "softmax_bf16")


def test_a_named_task_with_broken_toml_is_refused(family):
    (family / "softmax" / "task.toml").write_text("name = \n")
    assert str(family / "softmax" / "task.toml") in refused(family / "softmax_bf16")


def test_a_resolved_template_that_is_no_candidate_names_the_file_and_defines(family):
    template = family / "softmax" / "template.cu"
    template.write_text(template.read_text().replace('kernel = "softmax_template"', 'kernel = "gone"'))
    with pytest.raises(tasks.TaskError) as e:
        tasks.load(family / "softmax_bf16")
    assert str(e.value).startswith(f"{template} with BF16=1: launch names kernel 'gone'")


def test_a_bad_declaration_at_the_command_line_is_one_line(capsys, family):
    declare(family / "softmax_bf16", 'template = { task = "softmax", defines = { CAUSAL = 1 } }')
    assert_one_line(*run_main(capsys, "--tasks-dir", str(family), "tasks", "softmax_bf16"), "CAUSAL", "task.toml")
    assert cli.main(["--tasks-dir", str(family), "tasks", "softmax"]) == 0  # the family itself is fine
    capsys.readouterr()


def test_defines_go_after_the_header_and_a_headerless_text_gets_them_first():
    text = "/* fsr\n[[launch]]\n*/\n#if A\n#endif\n"
    assert task_templates._with_defines(text, {"A": 2}, "t") == (
        "/* fsr\n[[launch]]\n*/\n#define A 2  // t's define (its task.toml names this template)\n#if A\n#endif\n")
    assert task_templates._with_defines("#if A\n#endif\n", {"A": 2}, "t").startswith("#define A 2  //")
    assert task_templates._with_defines(text, {}, "t") == text


def test_the_seed_and_the_mutators_children_carry_the_variants_define():
    task = tasks.load("softmax_bf16")
    seeds = seed_candidates(task)
    template = next(c for c in seeds if c.origin.move == "template")
    assert "#define BF16 1" in template.source
    request = ProposalRequest(task, tuple(Scored(c, None, detect(c)) for c in seeds), n=6, seed=3)
    children = MutateProposer().propose(request).candidates
    from_template = [c for c in children if "softmax_template" in c.source]
    assert from_template and all("#define BF16 1" in c.source for c in from_template)


# ---- a header's `#if COND: KEY = VALUE` lines ---------------------------------------------------

GEMM_BODY = "*/\n#ifndef GELU\n#define GELU 0\n#endif\n#if GELU\n#endif\n#if VEC4\n#endif\n"


def gemm_header(*lines: str) -> str:
    return "/* fsr\n[features]\nVEC4 = [0, 1]\n\n[[launch]]\n" + "\n".join(lines) + "\n" + GEMM_BODY


def test_a_header_line_replaces_the_line_above_with_its_key_or_is_a_line_of_its_own():
    text = gemm_header('args = ["A", "C"]', '#if GELU: args = ["A", "bias", "C"]', '#if GELU: grid = ["2"]',
                       '#if not GELU: block = ["64"]', '#if GELU == 2: smem = "16"')
    where = Path("t.cu")
    assert task_templates._select(text, {}, where) == gemm_header('args = ["A", "C"]', 'block = ["64"]')
    assert task_templates._select(text, {"GELU": 1}, where) == gemm_header('args = ["A", "bias", "C"]', 'grid = ["2"]')
    assert task_templates._select(text, {"GELU": 2}, where) == gemm_header('args = ["A", "bias", "C"]', 'grid = ["2"]',
                                                                          'smem = "16"')
    plain = gemm_header('args = ["A", "C"]')
    assert task_templates._select(plain, {"GELU": 1}, where) is plain  # no such lines: the text as it is


@pytest.mark.parametrize(("line", "said"), [
    ('#if GELUX: args = ["A"]', "names GELUX, which its code tests in no #if"),
    ('#if VEC4: args = ["A"]', "names VEC4, a tunable or switch"),
    ('#if GELU ==: args = ["A"]', "cannot parse expression"),
    ('#if GELU: ["A"]', "is no KEY = VALUE line"),
])
def test_a_bad_header_line_is_refused(line, said):
    with pytest.raises(ValueError, match=re.escape(said)) as e:
        task_templates._select(gemm_header('args = ["A", "C"]', line), {"GELU": 1}, Path("t.cu"))
    assert str(e.value).startswith("t.cu: header line") and "\n" not in str(e.value)


def test_the_gemm_variant_has_its_kernels_bias_and_fast_math_and_the_family_has_neither():
    plain, gelu = (tasks.load(n) for n in ("gemm_bf16", "gemm_bf16_gelu"))
    own = (BUILTIN / "gemm_bf16" / "template.cu").read_text()
    assert candidate.parse(own, plain).source == own  # the file itself is gemm_bf16's candidate
    for task, kernels, bias in ((plain, ("gemm_bf16_template", "gemm_bf16_wgmma"), False),
                                (gelu, ("gemm_bf16_gelu_template", "gemm_bf16_gelu_wgmma"), True)):
        cand = candidate.parse(task.template_source, task)
        assert tuple(launch.kernel for launch in cand.launches) == kernels
        assert all(("bias" in launch.args) == bias for launch in cand.launches)
        assert ("FAST_MATH" in {f.name for f in cand.features}) == bias
        assert "#if GELU:" not in candidate.HEADER_RE.search(task.template_source).group(1)


def test_a_header_line_of_the_family_counts_in_the_variants_hash(tmp_path):
    for name in ("gemm_bf16", "gemm_bf16_gelu"):
        shutil.copytree(BUILTIN / name, tmp_path / name)
    before = tasks.load(tmp_path / "gemm_bf16_gelu")
    template = tmp_path / "gemm_bf16" / "template.cu"
    template.write_text(template.read_text().replace("#if GELU: FAST_MATH = [0, 1] ", "#if GELU: FAST_MATH = [0, 1, 2]"))
    after = tasks.load(tmp_path / "gemm_bf16_gelu")
    assert after.content_hash != before.content_hash and "FAST_MATH = [0, 1, 2]" in after.template_source


def test_a_bad_header_line_names_the_template_when_the_task_loads(tmp_path):
    for name in ("gemm_bf16", "gemm_bf16_gelu"):
        shutil.copytree(BUILTIN / name, tmp_path / name)
    template = tmp_path / "gemm_bf16" / "template.cu"
    template.write_text(template.read_text().replace("#if GELU: FAST_MATH", "#if GELLU: FAST_MATH"))
    message = refused(tmp_path / "gemm_bf16_gelu")
    assert f"{template}: header line #if names GELLU" in message
