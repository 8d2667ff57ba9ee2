"""Analyses of compiled programs: what they touch, move and compute, read off the IR."""
