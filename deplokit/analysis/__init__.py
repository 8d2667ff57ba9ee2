"""What the IR says a program costs, read off the IR alone (no GPU, no runtime).

    units.py      the one definition of a byte (per dtype) and of a FLOP
    traffic.py    compulsory bytes and FLOPs of Loop-IR and Kernel-IR kernels (benchmarks, inventory)
    work.py       work counts of a scheduled Tile-IR kernel: sectors, wavefronts, instructions (cost model)
    banks.py      shared-memory bank conflicts on Tile IR (passes 009 and 014, work.py)
    occupancy.py  theoretical occupancy of a block shape on a target
    inventory.py  a compilation's unique kernels, launch counts, bytes and FLOPs

Layering: analysis imports only deplokit.ir and deplokit.target (and errors); passes, runtime,
tune and the CLI import analysis, never the other way.
"""
