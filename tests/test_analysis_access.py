"""The memory-access view (deplokit.analysis.access) and the per-kernel roofline
(deplokit.tune.roofline): what one warp touches and where each kernel stands, no GPU."""
import pytest
import torch
import torch.nn.functional as F
from notebook_html import parse

import deplokit
from deplokit.analysis.access import accesses, memory_access
from deplokit.analysis.banks import smem_loads
from deplokit.tune.roofline import roofline_of


@pytest.fixture(scope="module")
def rms():
    torch.manual_seed(0)
    return deplokit.compile(torch.nn.RMSNorm(2048), torch.randn(1, 32, 2048))


def _linear(pad):
    # cp.async stages (on sm_90 the weight would be a TMA box, which 012 swizzles instead of
    # 014 padding it: test_tma.py)
    torch.manual_seed(0)
    return deplokit.compile(F.linear, torch.randn(64, 256), torch.randn(128, 256),
                            config={"014_pad_smem.pad": pad, "011_tma_copy.enable": False})


def test_float4_loads_are_coalesced_and_conflict_free(rms):
    found = accesses(rms.tile_ir.kernels[0], rms.tile_ir.types())
    assert {a.kind for a in found} == {"shared load", "global load", "global store"}
    assert all(a.width == 4 for a in found)
    for a in found:
        w = memory_access(rms, a.number)
        assert all(len(lane) == 4 for lane in w.addresses)      # one float4 per lane
        if w.shared:
            assert w.phase_lanes == 8 and w.degree == 1
        else:
            assert len(w.sectors) == 16 and w.efficiency == 1.0   # 512 contiguous bytes
    text = str(memory_access(rms, "p_weight"))
    assert "lane 31" in text and "(coalesced)" in text


def test_pad_smem_shows_as_fewer_wavefronts():
    degrees = {}
    for pad in (0, 4):
        c = _linear(pad)
        w = memory_access(c, "x1_smem")
        degrees[pad] = w.degree
        # the same count as the pass's own model (slot 0 is the worst slot here)
        assert w.degree == next(ld.degree for ld in smem_loads(c.tile_ir.kernels[0]) if ld.stage == "x1_smem")
    assert degrees == {0: 8, 4: 4}         # the quads layout: B's 4 slots of a lane, one float4
    w = memory_access(_linear(0), "x1_smem")
    busiest = max(len(v) for v in w.bank_words(range(32)).values())
    assert busiest == 8
    html = w._repr_mimebundle_()["text/html"]
    parse(html)
    assert "8-way bank conflict" in html and "#ff9e9e" in html


def test_an_unstaged_column_read_wastes_sectors():
    torch.manual_seed(0)
    c = deplokit.compile(torch.matmul, torch.randn(128, 256), torch.randn(256, 128),
                         config={"007_stage_inputs.stage": False, "008_register_tile.layout": "strided"})
    a_load, b_load = (memory_access(c, name) for name in ("x0", "x1"))
    assert a_load.efficiency < 0.2 and b_load.efficiency == 1.0
    assert a_load.requested_bytes == 4 * len({e for lane in a_load.addresses for e in lane})


def test_bad_choices_say_what_exists(rms):
    with pytest.raises(deplokit.DeplokitError, match="no access to 'nope'"):
        memory_access(rms, "nope")
    with pytest.raises(deplokit.DeplokitError, match="accesses 0..3"):
        memory_access(rms, 9)
    with pytest.raises(deplokit.DeplokitError, match="warps 0..7"):
        memory_access(rms, 0, warp=8)
    with pytest.raises(deplokit.DeplokitError, match="no kernel"):
        memory_access(rms, 0, kernel="nope")


def test_roofline_places_every_kernel_under_its_ceiling():
    torch.manual_seed(0)
    # one kernel, no split-K (its workspace would move the point left of the ridge)
    c = deplokit.compile(torch.matmul, torch.randn(128, 256), torch.randn(256, 128),
                         config={"003_split_matmul_k.splits": 1})
    r = roofline_of(c)
    assert [p.name for p in r.points] == [k.name for k in c.kernel_ir.kernels]
    mm = next(p for p in r.points if p.name == "merged_matmul")
    assert mm.flops == 2 * 128 * 256 * 128 and mm.bytes == 4 * (128 * 256 * 2 + 128 * 128)
    assert mm.intensity > r.ridge                              # a matmul: compute-bound
    for p in r.points:
        assert 0 < p.roof_us <= p.predicted_us and p.measured_us is None
    assert "no measured points" in str(r)
    parse(r._repr_mimebundle_()["text/html"])
    pytest.importorskip("matplotlib")
    from deplokit.notebook.plots import kernel_roofline
    fig = kernel_roofline(r)
    assert fig.axes[0].get_xscale() == "log"


def test_a_label_tells_two_views_of_one_access_apart():
    from deplokit.notebook.access_view import access_html
    torch.manual_seed(0)
    x, weight = torch.randn(64, 256), torch.randn(128, 256)
    padded = deplokit.compile(F.linear, x, weight)
    w = memory_access(padded, "x1_smem", label="padded (014 pad_smem)")
    assert str(w).startswith("padded (014 pad_smem): access ")
    assert "padded (014 pad_smem): shared load" in access_html(w)
    assert not str(memory_access(padded, "x1_smem")).startswith("padded")
