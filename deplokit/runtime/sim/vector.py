"""128-bit vector accesses (VectorLoad, VectorStore: 005's float4) of global or shared memory:
alignment and bounds checked, four values at once. A mixin of _Chunk (exec.py), using its
expression evaluation and the memory mixins' checked reads and writes."""
from __future__ import annotations

import numpy as np

from ...ir import kernel_ir as K
from .values import F32, _cast, _own


class _VectorAccesses:
    """VectorLoad and VectorStore statements of _Chunk."""

    def s_vector_load(self, s: K.VectorLoad, mask):
        off = self.ev_int(s.offset, mask)
        if s.space == "global":
            buf = self.gbuf(s.source, "VectorLoad")
            off = self.check_bounds(off, 4, buf.size, mask, f"buffer {s.source}", "VectorLoad", align=4)
            vals = [_cast(np.take(buf, off + j), F32) for j in range(4)]
            self.stats.global_bytes_loaded += self.count(mask) * 16
            self.stats.global_loads += self.count(mask)
        elif s.space == "shared":
            vals = self.shared_read(self.sarr(s.source, "VectorLoad"), off, 4, mask, "VectorLoad")
        else:
            self.fail(f"VectorLoad from unknown space {s.space!r}")
        for name, v in zip(s.dsts, vals):
            scope = None
            for sc in reversed(self.scopes):
                if name in sc:
                    scope = sc
                    break
            if scope is None:       # not declared yet: a fresh float register here
                self.scopes[-1][name] = [F32, _own(v)]
            else:
                self.set_var(scope[name], v, mask)

    def s_vector_store(self, s: K.VectorStore, mask):
        off = self.ev_int(s.offset, mask)
        values = [self.ev(v, mask) for v in s.values]
        if s.space == "global":
            self.global_write(s.target, "VectorStore", off, values, mask, align=4)
        elif s.space == "shared":
            self.shared_write(self.sarr(s.target, "VectorStore"), off, values, mask, "VectorStore", align=4)
        else:
            self.fail(f"VectorStore to unknown space {s.space!r}")
