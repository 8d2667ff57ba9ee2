"""Regenerate deplokit/ir/cuda_reserved_names.txt: every name that nvcc refuses as the name
of an `extern "C" __global__` kernel in a translation unit like the ones deplokit emits
(no includes: nvcc's implicit CUDA runtime and C library headers).

Candidates are every identifier followed by `(` in the preprocessed empty file, plus the
C++ keywords; each is tried as a kernel name, and those nvcc rejects are kept.

    .venv/bin/python scripts/cuda_c_linkage_names.py [--arch sm_90]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

OUT = os.path.join(os.path.dirname(__file__), "..", "deplokit", "ir", "cuda_reserved_names.txt")


def _nvcc(args, cwd):
    return subprocess.run(["nvcc", *args], cwd=cwd, capture_output=True, text=True)


def candidates(arch: str, tmp: str) -> list[str]:
    open(os.path.join(tmp, "empty.cu"), "w").close()
    _nvcc([f"-arch={arch}", "-E", "empty.cu", "-o", "empty.ii"], tmp)
    text = re.sub(r"^#.*$", "", open(os.path.join(tmp, "empty.ii")).read(), flags=re.M)
    names = set(re.findall(r"\b([A-Za-z][A-Za-z0-9_]*)\s*\(", text))
    names |= set(re.findall(r"\b([A-Za-z][A-Za-z0-9_]*)\b", text)) & _vector_types()
    r = _nvcc([f"-arch={arch}", "-E", "-Xcompiler", "-dM", "empty.cu"], tmp)   # macros, expanded away above
    names |= set(re.findall(r"^#define ([A-Za-z][A-Za-z0-9_]*)", r.stdout, flags=re.M))
    return sorted(names)


def _vector_types() -> set[str]:
    bases = "char uchar short ushort int uint long ulong longlong ulonglong float double".split()
    return {f"{b}{n}" for b in bases for n in range(1, 5)}


def rejected(names: list[str], arch: str, tmp: str) -> list[str]:
    """The names nvcc refuses as kernel names: compile all, drop the lines it reports, repeat."""
    bad, left = [], list(names)
    path = os.path.join(tmp, "kernels.cu")
    while left:
        with open(path, "w") as f:
            for n in left:
                f.write(f'extern "C" __global__ void {n}(float* p) {{ p[0] = 1.0f; }}\n')
        r = _nvcc([f"-arch={arch}", "-cubin", "-o", os.devnull, "kernels.cu"], tmp)
        if r.returncode == 0:
            break
        lines = sorted({int(m) for m in re.findall(r"kernels\.cu(?:\(|:)(\d+)[):]", r.stdout + r.stderr)})
        if not lines:
            raise SystemExit(f"nvcc failed without a line: {(r.stdout + r.stderr)[:400]}")
        # an error may be reported on the line after the culprit: confirm each one alone
        for n in {left[i - 1] for i in lines}:
            with open(os.path.join(tmp, "one.cu"), "w") as f:
                f.write(f'extern "C" __global__ void {n}(float* p) {{ p[0] = 1.0f; }}\n')
            if _nvcc([f"-arch={arch}", "-cubin", "-o", os.devnull, "one.cu"], tmp).returncode != 0:
                bad.append(n)
        left = [n for i, n in enumerate(left, 1) if i not in lines]
    return sorted(set(bad))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bad = rejected(candidates(args.arch, tmp), args.arch, tmp)
    with open(OUT, "w") as f:
        f.write("# Names nvcc refuses for an extern \"C\" kernel (scripts/cuda_c_linkage_names.py)\n")
        f.write("\n".join(bad) + "\n")
    print(f"{len(bad)} names -> {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
