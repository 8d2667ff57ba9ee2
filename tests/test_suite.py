"""The LLM suite: its shapes (derived from the presets, covering the seeds' 84), its programs
(checked on the simulator at a small config), listing, and a suite run that survives entries
that hang, crash or fail."""
import dataclasses
import json
import math
import os

import pytest
import torch

import deplokit
from deplokit.bench.report import summary, to_json, to_markdown
from deplokit.bench.runner import SuiteResult, run_suite
from deplokit.bench.suite import SEQS, format_list, model_entries, select, short_name, suite_entries
from deplokit.cli import main
from deplokit.frontend.presets import PRESETS

TSV = os.path.join(os.path.dirname(__file__), "data", "llm_suite_84.tsv")


def test_suite_covers_the_84_reference_shapes_by_name():
    entries = {e.name: e for e in suite_entries("llm") if e.dtype == "float32" and e.op != "moe"}
    rows = [line.rstrip("\n").split("\t") for line in open(TSV) if not line.startswith("#")]
    assert len(rows) == 84
    for name, op, shapes in rows:
        assert name in entries, name
        assert entries[name].op == op
        assert entries[name].shape_text() == shapes
    extra = {e.op for e in entries.values()} - {op for _, op, _ in rows}
    assert extra == {"rope", "add", "matmul_bias"}
    assert len(entries) == 102
    # and the same 102 shapes in bf16, named <name>.bf16
    half = {e.name: e for e in suite_entries("llm") if e.dtype == "bfloat16" and e.op != "moe"}
    assert len(half) == 102
    for name, e in entries.items():
        twin = half[name + ".bf16"]
        assert (twin.op, twin.shapes, twin.eps) == (e.op, e.shapes, e.eps)
        assert all(t.dtype == torch.bfloat16 for t in twin.inputs(empty=True))


def test_shapes_come_from_the_presets():
    assert {short_name(p) for p in PRESETS.values()} == {"tinyllama", "qwen"}
    qwen = PRESETS["Qwen/Qwen2.5-7B"]
    wider = dataclasses.replace(qwen, hidden=4096, heads=32)
    names = {e.name: e for e in model_entries(wider)}
    assert names["matmul.qwen.q_proj.s128"].shapes == ((1, 128, 4096), (4096, 4096))
    assert names["matmul.qwen.kv_proj.s128"].shapes == ((1, 128, 4096), (4096, 4 * 128))
    assert names["rmsnorm.qwen.s32"].eps == qwen.rms_eps
    assert {e.seq for e in names.values()} == set(SEQS)
    # only the model with q/k/v biases gets matmul_bias entries
    assert not any(e.op == "matmul_bias" for e in model_entries(PRESETS["TinyLlama/TinyLlama-1.1B-Chat-v1.0"]))


def test_every_program_matches_eager_on_the_simulator_at_a_small_config():
    tiny = dataclasses.replace(PRESETS["Qwen/Qwen2.5-7B"], name="Test/Tiny-1", hidden=48, heads=3, kv_heads=1,
                               intermediate=80)
    entries = model_entries(tiny, seqs=(5,))
    assert len({e.op for e in entries}) == 11 and {e.dtype for e in entries} == {"float32", "bfloat16"}
    for e in entries:
        c = deplokit.compile(e.program(), *e.inputs())
        result = c.check(backend="sim")      # a bf16 entry: against eager in bf16 and the float32 program
        assert result.passed and (result.float32 is not None) == (e.dtype == "bfloat16"), (e.name, str(result))


def test_inputs_are_seeded_and_weights_scaled():
    e = next(x for x in suite_entries() if x.name == "matmul.tinyllama.kv_proj.s32")
    a, b = e.inputs(), e.inputs()
    assert all((x == y).all() for x, y in zip(a, b))
    assert abs(float(a[1].std()) - 1 / math.sqrt(2048)) < 0.1 / math.sqrt(2048)
    assert [tuple(t.shape) for t in e.inputs(empty=True)] == [(1, 32, 2048), (2048, 256)]


def test_list_and_filter(capsys):
    assert main(["bench", "--suite", "llm", "--list"]) == 0
    out = capsys.readouterr().out
    assert "matmul.qwen.down_proj.s512" in out and "(1,512,18944) x (18944,3584)" in out
    assert out.rstrip().endswith("210 shapes") and "matmul.qwen.down_proj.s512.bf16" in out
    assert "moe.mixtral.s512" in out   # 204 decoder-layer shapes and 6 MoE blocks
    assert main(["bench", "--suite", "llm", "--list", "--filter", "rmsnorm.", "--filter", "sdpa.qwen"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("18 shapes")
    assert main(["bench", "--suite", "llm", "--list", "--filter", "nothing"]) == 2
    assert "no suite entry matches nothing" in capsys.readouterr().err
    assert format_list(select(suite_entries(), ["add.tinyllama.s32"])).count("\n") == 4   # and its .bf16


def test_suite_run_survives_hangs_crashes_and_errors(tmp_path):
    entries = [e for e in select(suite_entries(), ["rmsnorm.tinyllama.s32", "softmax.tinyllama.s32", "rope.qwen.s32",
                                                   "add.qwen.s32", "silu_mul.qwen.s32"]) if e.dtype == "float32"]
    seen = []
    result = run_suite(entries, "compile", timeout_s=3, watchdog_target="worker_targets:suite_job",
                       progress=lambda i, n, row: seen.append((i, n, row["status"])))
    status = {r["name"]: r["status"] for r in result.rows}
    assert status == {"rmsnorm.tinyllama.s32": "ok", "softmax.tinyllama.s32": "timeout", "silu_mul.qwen.s32": "ok",
                      "rope.qwen.s32": "crash", "add.qwen.s32": "error"}
    assert [s for _, _, s in seen] == [r["status"] for r in result.rows] and seen[-1][:2] == (4, 5)
    assert [r["name"] for r in result.rows] == [e.name for e in entries]
    timeout = next(r for r in result.rows if r["status"] == "timeout")
    assert "no answer within 3 s; worker killed" in timeout["error"]
    md = to_markdown(result)
    assert "| rope.qwen.s32 | crash: worker exited with status 7 |" in md
    assert "illegal memory access" in md
    data = json.loads(to_json(result))
    assert sorted(data["failed"]) == ["add.qwen.s32", "rope.qwen.s32", "softmax.tinyllama.s32"]
    text = summary(result)
    assert "2/5 entries ok" in text and "FAILED rope.qwen.s32: crash" in text


def test_geomean_uses_only_timed_entries():
    rows = [{"name": "a", "status": "ok", "report": {"deplokit_us": 10.0, "eager_us": 20.0, "compile_us": 5.0}},
            {"name": "b", "status": "ok", "report": {"deplokit_us": 10.0, "eager_us": 5.0, "compile_us": None}},
            {"name": "c", "status": "timeout", "error": "no answer"}]
    g = SuiteResult("llm", "sm_90", "bench", rows).geomeans()
    assert g["eager"] == pytest.approx(1.0) and g["compile"] == pytest.approx(0.5)
    assert SuiteResult("llm", "sm_90", "bench", rows[2:]).geomeans() == {"eager": None, "compile": None}


def test_compile_only_suite_entry_runs_in_a_worker(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["bench", "--suite", "llm", "--compile-only", "--filter", "rmsnorm.tinyllama.s32",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2/2 entries ok" in text          # the FP32 entry and its bf16 twin
    data = json.loads((out / "suite_llm_sm_90_compile.json").read_text())
    rows = data["rows"]
    assert [r["name"] for r in rows] == ["rmsnorm.tinyllama.s32", "rmsnorm.tinyllama.s32.bf16"]
    assert all(r["kernels"] == 1 and r["compile_s"] > 0 for r in rows)
    md = (out / "suite_llm_sm_90_compile.md").read_text()
    assert "| rmsnorm.tinyllama.s32 | ok | 1 |" in md and "| rmsnorm.tinyllama.s32.bf16 | ok | 1 |" in md


def test_compile_only_builds_a_wgmma_entry_for_sm_90a(tmp_path):
    """A bf16 projection issues wgmma on sm_90: NVRTC builds it for sm_90a, the only PTX that has
    wgmma (CudaSource.build_arch), not for the plain target it was asked for."""
    from deplokit.bench.runner import compile_entry
    from deplokit.runtime.nvrtc import nvrtc_available
    if not nvrtc_available():
        pytest.skip("NVRTC not available")
    row = compile_entry("matmul.qwen.q_proj.s128.bf16", "sm_90")
    assert row["status"] == "ok" and row["cubin_bytes"] > 0


def test_resume_runs_only_what_an_earlier_run_left(tmp_path, capsys):
    out = tmp_path / "res"
    args = ["bench", "--suite", "llm", "--compile-only", "--out", str(out)]
    assert main(args + ["--filter", "add.tinyllama.s32"]) == 0
    path = out / "suite_llm_sm_90_compile.json"
    first = json.loads(path.read_text())["rows"][0]
    capsys.readouterr()
    assert main(args + ["--resume", "--filter", "rmsnorm.tinyllama.s32", "--filter", "add.tinyllama.s32"]) == 0
    text = capsys.readouterr().out
    assert "resuming: 2 of 4 entries already ok" in text      # each entry and its bf16 twin
    assert "[1/2] rmsnorm.tinyllama.s32: ok" in text and "add.tinyllama.s32: ok" not in text
    assert "4/4 entries ok" in text
    rows = json.loads(path.read_text())["rows"]
    assert [r["name"] for r in rows] == ["rmsnorm.tinyllama.s32", "add.tinyllama.s32",      # suite order
                                         "rmsnorm.tinyllama.s32.bf16", "add.tinyllama.s32.bf16"]
    assert rows[1] == first                                   # the earlier row, not a re-run
    md = (out / "suite_llm_sm_90_compile.md").read_text()
    assert "| rmsnorm.tinyllama.s32 | ok |" in md and "| add.tinyllama.s32 | ok |" in md


def test_resume_refuses_another_runs_file(tmp_path, capsys):
    out = tmp_path / "res"
    out.mkdir()
    path = out / "suite_llm_sm_90_compile.json"
    path.write_text(json.dumps({"suite": "llm", "target": "sm_80", "job": "compile", "rows": []}))
    args = ["bench", "--suite", "llm", "--compile-only", "--out", str(out), "--resume", "--filter", "add.qwen.s32"]
    assert main(args) == 2
    assert "holds suite llm, target sm_80, job compile; this run is suite llm, target sm_90" in capsys.readouterr().err
    path.write_text('{"rows": [')                             # a file cut short by hand
    assert main(args) == 2
    assert "--resume: cannot read" in capsys.readouterr().err
    assert path.read_text() == '{"rows": ['                   # left as it was


def test_causal_gqa_sdpa_is_timed_against_both_eager_ways():
    import torch
    e = next(x for x in suite_entries("llm") if x.op == "sdpa" and x.name.startswith("sdpa.qwen"))
    ways = e.eager_ways()
    assert list(ways) == ["enable_gqa=True", "K/V repeated"]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, 16, 32, generator=g) for h in (e.shapes[0][1], e.shapes[1][1], e.shapes[2][1]))
    assert q.shape[1] > k.shape[1]                       # grouped: 28 query heads over 4 K/V heads
    gqa, repeated = (fn(q, k, v) for fn in ways.values())
    assert torch.allclose(gqa, repeated, atol=1e-6)       # the same attention, two eager ways
    assert list(next(x for x in suite_entries("llm") if x.op == "matmul").eager_ways()) == ["eager"]


@pytest.mark.gpu
def test_eager_ways_are_timed_on_the_device():
    from deplokit.runtime.bench import time_eager_ways
    from deplokit.runtime.device import gpu_available
    if not gpu_available():
        pytest.skip("needs a CUDA device")
    e = next(x for x in suite_entries("llm") if x.op == "sdpa")
    timed = time_eager_ways(e.eager_ways(), e.inputs(), deplokit.target.get_target("sm_90"), warmup=1, repeats=3)
    assert set(timed) == set(e.eager_ways()) and all(t > 0 for t in timed.values())
