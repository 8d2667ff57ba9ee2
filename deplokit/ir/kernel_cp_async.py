"""The Kernel-IR statements of cp.async copies (sm_80: 013 async_copy makes a stage
asynchronous, passes/lower/k002_stage_copies.py emits them, passes/lower/cuda_cp_async.py
prints them as CUDA, runtime/sim/cp_async.py runs them): each thread's copies from global to
shared memory that bypass its registers, committed as groups and waited for by count. Each
statement prints itself (`text`) and names its locals (`LOCAL_FIELDS`) and its expressions
(`MORE_EXPRS`), which kernel_ir asks of a statement it does not know."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .kernel_ir import Expr, format_copy


@dataclass(frozen=True)
class CpAsync:
    """cp.async of `nbytes` (4, 8 or 16) from global to shared; lands by a later wait."""
    array: str
    dst_offset: Expr
    buffer: str
    src_offset: Expr
    nbytes: int = 4
    LOCAL_FIELDS = ("array",)
    MORE_EXPRS = ("dst_offset", "src_offset")

    def text(self) -> str:
        return f"cp.async {self.nbytes}B {format_copy(self)}"


@dataclass(frozen=True)
class CpAsyncCommit:
    """cp.async.commit_group: the thread's copies since the last commit form one group."""

    def text(self) -> str:
        return "cp.async.commit"


@dataclass(frozen=True)
class CpAsyncWait:
    pending: int = 0              # wait until at most this many groups are in flight

    def text(self) -> str:
        return f"cp.async.wait {self.pending}"


CpAsyncStmt = Union[CpAsync, CpAsyncCommit, CpAsyncWait]
