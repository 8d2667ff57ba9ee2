"""What the IR (and the machine code made from it) says a program costs, read off alone (no
GPU, no runtime).

    units.py      the one definition of a byte (per dtype) and of a FLOP
    traffic.py    compulsory bytes and FLOPs of Loop-IR and Kernel-IR kernels (benchmarks, inventory)
    work.py       work counts of a scheduled Tile-IR kernel: sectors, wavefronts, instructions (cost model)
    banks.py      shared-memory bank conflicts on Tile IR (passes 009 and 014, work.py)
    occupancy.py  theoretical occupancy of a block shape on a target
    inventory.py  a compilation's unique kernels, launch counts, bytes and FLOPs
    sass_parse.py SASS text -> instructions, basic blocks, natural loops
    sass.py       the machine code view: each kernel's hottest loop and its instruction mix
    access.py     one warp's load or store: the global sectors and shared-memory banks it touches

Layering: analysis imports only deplokit.ir and deplokit.target (and errors, the display
hook); passes, runtime, tune and the CLI import analysis, never the other way.
"""
