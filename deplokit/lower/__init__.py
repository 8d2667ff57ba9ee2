"""Lowerings out of deplokit's IRs into text another tool consumes (CUDA C++ for nvcc)."""
