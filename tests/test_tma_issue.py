"""The TMA ring's issue cost (issue 15): the producer is one lane that warp 0 elects, its
copies' shared addresses are kept in registers, and the SASS view tells the producer's
instructions and the out-of-line slow paths from what every warp issues. Structural checks
on the emitted CUDA (no nvcc needed), the simulator running the elected ring, an nvcc build
per architecture, and the issue split on a hand-written SASS listing."""
from __future__ import annotations

import re

import pytest
import torch
from stage_helpers import TMA_ON

import deplokit
from deplokit.analysis.sass import analyze_sass
from deplokit.analysis.sass_issue import issue_split
from deplokit.ir import kernel_ir as K
from deplokit.runtime.nvcc import nvcc_available


def _matmul(m, k, n, target="sm_90", config=None):
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)
    return deplokit.compile(torch.matmul, a, b, target=target, config={**TMA_ON, **(config or {})}), a, b


def _k_loop(cuda: str) -> str:
    """The text of the pipelined K loop: from its mbarrier wait to the empty-slot release."""
    start = cuda.index("// steady state")
    return cuda[cuda.rindex("for (int", 0, start):cuda.index("release it to the producer", start)]


def test_ring_producer_is_elected_in_warp_0():
    c, _, _ = _matmul(64, 256, 64)
    cuda = str(c.cuda)
    elected = [s for s in K.walk_stmts(c.kernel_ir.kernels[0].body) if isinstance(s, K.If) and s.elect]
    assert elected, "the TMA issue is an If stamped elect"
    assert cuda.count("__device__ __forceinline__ bool deplokit_elect_one()") == 1
    assert "elect.sync _|e, 0xffffffff;" in cuda
    loop = _k_loop(cuda)
    assert "if (threadIdx.x < 32 && deplokit_elect_one()) {" in loop
    assert "threadIdx.x == 0" not in loop
    # one tensor-map copy per operand per K step, one expect_tx, one empty-slot wait
    assert loop.count("cp.async.bulk.tensor") == 2
    assert loop.count("mbarrier.arrive.expect_tx") == 1
    assert loop.count("mbarrier.try_wait.parity") == 2       # full[slot] (all), empty[next] (producer)


def test_shared_addresses_are_pinned_once():
    c, _, _ = _matmul(64, 256, 64)
    cuda = str(c.cuda)
    loop = _k_loop(cuda)
    # no shared-window conversion inside the K loop: barriers and copy destinations use the
    # addresses computed once before it
    assert "__cvta_generic_to_shared" not in loop
    pinned = re.findall(r'asm\("mov\.u32 %0, %1;\\n" : "=r"\((\w+)\)', cuda)
    assert pinned == ["a2o_full_addr", "a2o_empty_addr", "x0_smem_addr", "x1_smem_addr"]
    for name in pinned:
        assert cuda.count(f"unsigned {name};") == 1
    dst = re.findall(r'"r"\((\w+) \+ 4 \* \(', loop)
    assert dst and set(dst) <= set(pinned)


@pytest.mark.parametrize("shape", [(64, 256, 64), (33, 80, 40)])
def test_elected_ring_runs_in_the_simulator(shape):
    c, a, b = _matmul(*shape)
    assert any(isinstance(s, K.If) and s.elect for s in K.walk_stmts(c.kernel_ir.kernels[0].body))
    assert c.check(a, b, backend="sim").ok


def test_sm80_keeps_cp_async_and_no_election():
    c, a, b = _matmul(64, 256, 64, target="sm_80")
    cuda = str(c.cuda)
    assert "cp.async.cg" in cuda and "elect" not in cuda and "cp.async.bulk" not in cuda


@pytest.mark.skipif(not nvcc_available(), reason="nvcc not installed")
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_120"])
def test_elected_ring_builds(target):
    c, _, _ = _matmul(64, 256, 64, target=target)
    result = c.nvcc()                   # raises with ptxas's log when it does not build
    assert result.cubin and result.arch == target


SASS = """
        Function : ring
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R3+UR4], R4 ;
        /*0020*/               @!P1 BRA 0x120 ;
        /*0030*/               @P0 BRA 0x80 ;
        /*0040*/                   ELECT P2, URZ, PT ;
        /*0050*/               @!P2 BRA 0x80 ;
        /*0060*/                   SYNCS.ARRIVE.TRANS64 RZ, [R5+UR4], R6 ;
        /*0070*/                   UTMALDG.2D [UR8], [UR10] ;
        /*0080*/                   FFMA R8, R9, R10, R8 ;
        /*0090*/                   FFMA R11, R9, R10, R11 ;
        /*00a0*/                   SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R3+UR4], RZ ;
        /*00b0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*00c0*/                   ISETP.GE.AND P3, PT, R0, 0x8, PT ;
        /*00d0*/               @!P3 BRA 0x10 ;
        /*00e0*/                   EXIT ;
        /*0120*/                   YIELD ;
        /*0130*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R3+UR4], R4 ;
        /*0140*/               @!P1 BRA 0x120 ;
        /*0150*/                   BRA 0x30 ;
"""


def test_issue_split_separates_producer_and_slow_paths():
    k = analyze_sass(SASS, "sm_90").kernel("ring")
    loop = k.main_loop()
    assert loop.mix.instructions == 17 and loop.mix.tma == 1
    split = issue_split(k, loop)
    # ELECT, its branch, the arrive.expect_tx, the copy: only warp 0's elected lane
    assert split.producer == 4
    # the retry of a failed poll, out of line after EXIT
    assert split.cold == 4
    assert split.consumer == 9
    assert split.slots_per_warp(4) == pytest.approx(10.0)


def test_verifier_refuses_an_election_warp_0_may_not_reach_converged():
    from deplokit.errors import IRInvariantError
    from deplokit.passes.verify import verify
    tid = K.Special("tid.x")
    issue = K.If(K.Binary("==", tid, K.Const(0, "int")), (K.GlobalStore("out", tid, K.Const(1.0)),), elect=True)

    def program(body):
        func = K.KernelFunc("k", (K.Param("out", const=False, size=64),), (1, 1, 1), (64, 1, 1), tuple(body))
        return K.KernelProgram((), (), (func,), ())

    uniform = K.For("k", K.Const(0, "int"), K.Const(4, "int"), K.Const(1, "int"), (issue,))
    verify(program([uniform]))
    with pytest.raises(IRInvariantError, match="elected issue") as e:
        verify(program([K.If(K.Binary("<", tid, K.Const(16, "int")), (issue,))]))
    assert e.value.invariant == "uniform-barriers"
