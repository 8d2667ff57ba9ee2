"""The machine code view: SASS parsing and loop analysis on stored samples (no tools needed),
and real nvcc + cuobjdump runs (skipped without them)."""
from __future__ import annotations

import pathlib

import pytest
import torch

import deplokit
from deplokit.analysis.sass import analyze_sass, shared_width
from deplokit.analysis.sass_parse import parse_sass
from deplokit.errors import DeplokitError
from deplokit.runtime.nvcc import nvcc_available
from deplokit.runtime.sass import sass_available

DATA = pathlib.Path(__file__).parent / "data"
needs_sass = pytest.mark.skipif(not sass_available(), reason="nvcc and cuobjdump/nvdisasm not installed")


def sample(tool: str):
    return analyze_sass((DATA / f"sass_sample_{tool}.txt").read_text(), "sm_90", tool)


def test_parse_cuobjdump_kernels_and_targets():
    parsed = parse_sass((DATA / "sass_sample_cuobjdump.txt").read_text())
    assert list(parsed) == ["sample_matmul", "sample_copy"]
    mm = parsed["sample_matmul"]
    assert mm[-1].address == 0x200 and mm[-1].base == "BRA"     # the trailing NOP padding is gone
    branch = next(i for i in mm if i.address == 0x70)
    assert (branch.predicate, branch.opcode, branch.target) == ("!P1", "BRA", 0x1D0)
    assert next(i for i in mm if i.address == 0x30).never        # @!PT LDS: a placeholder
    assert str(next(i for i in mm if i.address == 0xF0)) == "/*00f0*/ LDS.U.64 R16, [R8+0x100] ;"


def test_shared_widths():
    assert [shared_width(op) for op in ("LDS", "LDS.U", "LDS.64", "LDS.U.128", "LDS.U8")] == [32, 32, 64, 128, 32]


def test_loops_nesting_and_hottest_cuobjdump():
    k = sample("cuobjdump").kernel("sample_matmul")
    assert [(lp.header, lp.depth, lp.parent) for lp in k.loops] == [(0x60, 1, None), (0x90, 2, 1), (0x1D0, 2, 1)]
    hot = k.hottest
    # the K loop wins over the ELECT loop around the bulk copy and the mbarrier retry loop,
    # though both are nested deeper: they do no floating-point work
    assert hot.index == 1 and (hot.start, hot.end) == (0x60, 0x1F0)
    m = hot.mix
    assert (m.instructions, m.ffma, m.lds, m.lds64, m.lds128) == (22, 6, 1, 1, 1)
    assert (m.bulk, m.ldgsts, m.bar, m.mbarrier_waits, m.ldg, m.stg) == (1, 1, 1, 2, 0, 0)
    assert m.ffma_share == pytest.approx(6 / 22) and m.shared_loads_per_ffma == pytest.approx(0.5)
    assert k.main_loop() is hot
    # the backward jump from the retry path into the loop is not a loop of its own, and the
    # unreachable `BRA self` after EXIT is none either
    assert len(k.loops) == 3
    assert k.mix.instructions == 32 and k.mix.ldg == 1 and k.mix.bar == 2


def test_nvdisasm_labels_give_the_same_structure():
    k = sample("nvdisasm").kernel("sample_matmul")
    assert [(lp.header, lp.depth) for lp in k.loops] == [(0x20, 1), (0x100, 2)]
    assert k.hottest.index == 1 and k.hottest.mix.ffma == 4 and k.hottest.mix.lds128 == 2
    assert k.hottest.mix.instructions == 15


def test_innermost_fp_loop_is_hottest():
    text = """
        Function : nested
        /*0000*/                   MOV R2, RZ ;
        /*0010*/                   MOV R3, RZ ;
        /*0020*/                   FFMA R4, R5, R6, R4 ;
        /*0030*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0040*/                   ISETP.GE.AND P0, PT, R3, 0x8, PT ;
        /*0050*/               @!P0 BRA 0x20 ;
        /*0060*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0070*/                   ISETP.GE.AND P1, PT, R2, 0x8, PT ;
        /*0080*/               @!P1 BRA 0x10 ;
        /*0090*/                   EXIT ;
    """
    k = analyze_sass(text, "sm_90").kernel("nested")
    assert [(lp.header, lp.depth) for lp in k.loops] == [(0x10, 1), (0x20, 2)]
    assert k.hottest.header == 0x20 and k.hottest.mix.instructions == 4
    assert k.main_loop().header == 0x10


def test_report_text_marks_the_hottest_loop():
    r = sample("cuobjdump")
    text = str(r)
    assert text == str(sample("cuobjdump"))                      # deterministic
    assert "// hottest loop L1 (0x0060..0x01f0, depth 1):" in text
    assert "L1 * /*0100*/ FFMA R20, R10, R12, R20 ;" in text
    assert "     /*0190*/ LDG.E R30, desc[UR4][R26.64] ;" in text
    assert "// no loop: straight-line code" in r.summary()
    with pytest.raises(KeyError):
        r.kernel("absent")


def test_no_disassembler_is_one_clear_error(monkeypatch):
    from deplokit.runtime import disasm
    monkeypatch.setenv("DEPLOKIT_CUOBJDUMP", "/nonexistent/cuobjdump")
    monkeypatch.setenv("DEPLOKIT_NVDISASM", "/nonexistent/nvdisasm")
    assert disasm.find_disassembler() is None
    with pytest.raises(DeplokitError, match="cuobjdump"):
        disasm.disassemble(b"")


def test_cli_without_nvcc_prints_one_line(monkeypatch, capsys):
    from deplokit.cli import main
    monkeypatch.setenv("DEPLOKIT_NVCC", "/nonexistent/nvcc")
    rc = main(["compile", "-c", "x = torch.randn(8, 8); w = torch.randn(8, 8); x @ w", "--ir", "sass"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("deplokit: error: ") and "nvcc" in err[0]


# -- with the tools --------------------------------------------------------------------------------

@needs_sass
def test_real_matmul_sass():
    c = deplokit.compile(torch.matmul, torch.randn(64, 128), torch.randn(128, 96))
    before = str(c.cuda)
    report = c.sass()
    assert str(c.cuda) == before and report.arch == "sm_90"
    main = next(k for k in report.kernels if k.hottest is not None and k.hottest.mix.ffma)
    hot = main.hottest
    assert hot.mix.ffma > 0 and 0 < hot.mix.ffma_share < 1
    assert hot.mix.shared_loads > 0                  # 007 stages A and B in shared memory
    assert main.registers and main.registers > 0 and main.spills == 0
    assert str(report) == str(c.sass())               # byte-identical across runs


@needs_sass
def test_real_sass_other_arch_and_cli(capsys):
    from deplokit.cli import main
    c = deplokit.compile(lambda x: torch.relu(x) * 2, torch.randn(1024))
    assert c.sass("sm_80").arch == "sm_80"
    rc = main(["compile", "-c", "x = torch.randn(64, 64); w = torch.randn(64, 64); x @ w", "--ir", "sass"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("// SASS for sm_90") and "// hottest loop" in out and "FFMA" in out


def test_notebook_rendering_highlights_the_hottest_loop():
    pytest.importorskip("pygments")
    from deplokit.display import mimebundle
    from deplokit.notebook.sass_view import HOT_BG
    r = sample("cuobjdump")
    bundle = mimebundle(r)
    html = bundle["text/html"]
    assert bundle["text/plain"] == r.summary()
    assert html == mimebundle(sample("cuobjdump"))["text/html"]          # a pure function of the report
    # the K loop highlighted in two runs: its body and its mbarrier retry path at the end
    assert html.count(f"background: {HOT_BG}") == 2
    hot_run = html.split(f"background: {HOT_BG};")[1].split("</pre>")[0]
    assert "FFMA R20" in hot_run and "LDG.E R30" not in hot_run
    assert "LDS.128" in html and "27% of the instructions" in html
    assert "no loop: straight-line code" in html                          # sample_copy


@pytest.mark.skipif(not nvcc_available(), reason="nvcc (CUDA toolkit) not installed")
def test_cli_without_disassembler_prints_one_line(monkeypatch, capsys):
    from deplokit.cli import main
    from deplokit.runtime import sass
    monkeypatch.setattr(sass, "find_disassembler", lambda: None)     # nvcc here, no cuobjdump / nvdisasm
    rc = main(["compile", "-c", "x = torch.randn(8, 8); w = torch.randn(8, 8); x @ w", "--ir", "sass"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cuobjdump" in err[0] and err[0].startswith("deplokit: error: ")
