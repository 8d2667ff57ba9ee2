"""A seeded differential fuzzer: random chains of the ops the decompose registry covers, on
odd shapes, with random knob configs and targets, run on every backend against torch eager.

    python -m deplokit.fuzz --seed 1 --cases 200            # or: make fuzz
    python -m deplokit.fuzz --replay --target sm_80 --config '{}' -c 'x0 = torch.randn(3, 33); ...'

`fuzz(seed, cases)` returns a FuzzReport: the cases run and, per failure class, the smallest
case that shows it with a one-line reproducer.
"""
