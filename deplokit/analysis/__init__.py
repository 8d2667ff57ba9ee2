"""What the IR (and the machine code made from it) says a program costs, read off alone.

    sass_parse.py SASS text -> instructions, basic blocks, natural loops
    sass.py       the machine code view: each kernel's hottest loop and its instruction mix
"""
