"""Tensor IR -> Loop IR: lift (lift.py), fuse producers into consumers (fusion.py), attention fusion
(attention.py) and row fusion (rows.py), each a pass of the pipeline."""
