"""The PTX lexer the rules on what runs read through (fsr.evaluate.ptx_text): string literals and
comments as ptxas reads them, checked against NVRTC's own ptxas (no GPU needed), and the programs
it cannot read refused by the guards, never passed."""

from __future__ import annotations

import pytest

from fsr.evaluate import guards, ptx_text

MARK = "garbage_op"  # no PTX instruction: ptxas refuses a program where it is not inside a comment

# PTX written through inline asm, each with MARK inside a comment or not; ptxas decides which.
PROBES = {
    "between pragmas holding block markers": '.pragma "/*";\n\tgarbage_op;\n\t.pragma "*/";',
    "after a pragma holding a line marker": '.pragma "//"; garbage_op;',
    "a quote inside a block comment": '/* .pragma " */ garbage_op; // "',
    "a quote inside a line comment": '// "\n\tgarbage_op; // "',
    "block comments do not nest": "/* /* */ garbage_op; // */",
    "a backslash escapes nothing": '.pragma "\\", "/*";\n\tgarbage_op;\n\t.pragma "*/";',
    "a string across a newline": '.pragma "a\n/*";\n\tgarbage_op;\n\t.pragma "*/";',
    "a line comment": "// garbage_op",
    "a carriage return does not end a line comment": "// x\r garbage_op;",
    "a form feed does not end a line comment": "// x\f garbage_op;",
    "a block comment after a string": '.pragma "*/"; /* garbage_op */',
    "a line comment inside a block comment": "/* // */ /* garbage_op */",
}


def c_string(text: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\f": "\\f"}
    return '"' + "".join(escapes.get(ch, ch) for ch in text) + '"'


def ptxas_accepts(asm: str) -> bool:
    """Whether NVRTC compiles (to a cubin: ptxas assembles it) a kernel whose body is `asm`."""
    from cupy_backends.cuda.libs import nvrtc

    source = f'extern "C" __global__ void k(float* y) {{ asm volatile({c_string(asm)}); y[0] = 1.0f; }}'
    prog = nvrtc.createProgram(source, "probe.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["--gpu-architecture=sm_90"])
        return bool(nvrtc.getCUBIN(prog))
    except nvrtc.NVRTCError:
        return False
    finally:
        nvrtc.destroyProgram(prog)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_the_lexer_hides_exactly_what_ptxas_does_not_assemble(name):
    asm = PROBES[name]
    visible = MARK in ptx_text.code(asm)
    assert visible != ptxas_accepts(asm), f"{name}: the lexer reads {MARK} as {'code' if visible else 'a comment'}"


def test_comments_go_and_strings_stay():
    text = '.pragma "/* kept */";\n// gone\nmov.u32 %r1, 1; /* gone\n too */ ret;'
    code = ptx_text.code(text)
    assert '.pragma "/* kept */";' in code and "mov.u32 %r1, 1;" in code and "ret;" in code
    assert "gone" not in code and "too" not in code


def test_a_comment_separates_as_whitespace_does():
    assert ptx_text.code("%glob/* */altimer") == "%glob altimer"


@pytest.mark.parametrize("text,what", [
    ('.pragma "nounroll;\nret;', "string literal opened on line 1"),
    ('ret;\n.pragma "a" "b;', "string literal opened on line 2"),
    ("ret;\n\n/* never closed\nmov.u64 %rd1, %globaltimer;", "block comment opened on line 3"),
    ('.pragma "*/"; /* "', "block comment opened on line 1"),
])
def test_a_string_or_comment_never_closed_is_unreadable(text, what):
    with pytest.raises(ptx_text.Unreadable, match=what):
        ptx_text.code(text)


HONEST = ".version 8.8\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\t.pragma \"nounroll\";\n\tret;\n}\n"


def test_the_guards_refuse_ptx_they_cannot_read():
    assert guards.check_ptx(HONEST) is None
    for ptx in ("", "  \n", HONEST + '.pragma "open;\n', HONEST + "/* open\n"):
        reason = guards.check_ptx(ptx)
        assert reason is not None and reason.startswith("ptx-unreadable") and "refused" in reason, (ptx, reason)


@pytest.mark.parametrize("hidden", [
    '.pragma "/*";\n\tmov.u64 %rd1, %globaltimer;\n\t.pragma "*/";',
    '.pragma "//"; mov.u64 %rd1, %globaltimer;',
    '.pragma "\\", "/*";\n\tmov.u32 %r1, %smid;\n\t.pragma "*/";',
])
def test_an_instruction_between_markers_in_strings_is_refused(hidden):
    ptx = HONEST.replace("\tret;", f"\t{hidden}\n\tret;")
    reason = guards.check_ptx(ptx)
    assert reason is not None and reason.split(":")[0] in ("timer", "sm-id"), reason
