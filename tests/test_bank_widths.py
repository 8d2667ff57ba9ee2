"""Bank conflicts and warp accesses read the width the schedule stamped on a vector loop's
shared load (Load.shared_width), as the lowering does: a float4 is served 8 lanes at a
time, a load stamped 1 is spelled lane by lane, 4 warp-wide scalar loads."""
import dataclasses

import pytest
import torch

import deplokit
from deplokit.analysis.access import accesses, warp_access
from deplokit.analysis.banks import smem_loads, stage_cost
from deplokit.ir.loop_ir import Load
from deplokit.ir.tile_ir import Stage, Tile, map_body, walk
from deplokit.passes.record import replace_tile


@pytest.fixture(scope="module")
def rms():
    torch.manual_seed(0)
    return deplokit.compile(torch.nn.RMSNorm(2048), torch.randn(1, 32, 2048))


def _stamped(kernel, width):
    """The kernel with every load from a stage stamped `width` floats wide in shared memory."""
    tile = kernel.tile()
    stages = {s.name for s, _ in walk(tile.body) if isinstance(s, Stage)}

    def stamp(s):
        return dataclasses.replace(s, shared_width=width) if isinstance(s, Load) and s.tensor in stages else s
    return replace_tile(kernel, Tile(tile.axes, map_body(tile.body, stamp)))


def test_float4_stamp_is_one_conflict_free_access(rms):
    k = rms.tile_ir.kernels[0]
    loads = smem_loads(k)
    assert loads and all(ld.degree == 1 and ld.wavefronts == 1 and ld.slots == 1 for ld in loads)


def test_lane_by_lane_stamp_is_four_scalar_loads(rms):
    # lane t's float4 starts at word 4t: read one float at a time, 32 lanes stride 4 words,
    # 8 banks serve 4 words each, for each of the 4 loads (the old model priced a float4: 1)
    k = _stamped(rms.tile_ir.kernels[0], 1)
    loads = smem_loads(k)
    assert loads and all(ld.degree == 4 and ld.wavefronts == 16 and ld.slots == 1 for ld in loads)
    assert stage_cost(k) == {"x_smem": (4, 32)}      # its two loads, in0 and in1


def test_eight_byte_stamp_is_served_sixteen_lanes_at_a_time(rms):
    # 2 floats per lane at word 4t: 16 lanes (128 bytes) a phase, words 0..61 step 4 plus
    # their neighbours: banks 0,1,4,5,.. serve 2 distinct words each
    k = _stamped(rms.tile_ir.kernels[0], 2)
    assert all(ld.degree == 2 and ld.wavefronts == 2 for ld in smem_loads(k))


def test_warp_access_reads_the_stamp(rms):
    k, types = rms.tile_ir.kernels[0], rms.tile_ir.types()
    shared = [a for a in accesses(k, types) if a.kind == "shared load"]
    assert shared and all(a.width == 4 for a in shared)
    w = warp_access(k, types, shared[0].number)
    assert w.phase_lanes == 8 and w.degree == 1 and all(len(lane) == 4 for lane in w.addresses)

    scalar = _stamped(k, 1)
    found = [a for a in accesses(scalar, types) if a.kind == "shared load"]
    assert all(a.width == 1 for a in found)
    for v in range(4):                 # one warp-wide scalar load per value of the vector variable
        w = warp_access(scalar, types, found[0].number, slot={"a1v": v})
        assert w.phase_lanes == 32 and w.degree == 4
        assert [lane for lane in w.addresses] == [(4 * t + v,) for t in range(32)]
    assert "4-way bank conflict" in str(w)
