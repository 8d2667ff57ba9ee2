"""What the IR (and the machine code made from it) says a program costs, read off alone.

    sass_parse.py SASS text -> instructions, basic blocks, natural loops
    sass.py       the machine code view: each kernel's hottest loop and its instruction mix
    access.py     one warp's load or store: the global sectors and shared-memory banks it touches
    roofline.py   each kernel against the target's ceilings, with the cost model's time
"""
