"""Autotuning: SP-MCTS over the scheduling passes' knobs (see result.py for what it returns)."""
