"""Pygments lexers for deplokit's IR texts (CUDA uses pygments' own CudaLexer).

Each lexer follows the printer of its IR (deplokit/ir/*.py): what a line can hold is
known, so the rules are few and every token type means one thing across the IRs:
Keyword (for, load, barrier ...), Keyword.Type (float32, THREAD, Stage ...), Name.Function
(operators: multiply, rsqrt ...), Name.Attribute (axis=, origin= ...), Name.Variable (a
tensor or value being defined), Generic.Heading (`=== kernel ===`), Comment, Number."""
from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, include, words
from pygments.lexers.c_like import CudaLexer
from pygments.token import Comment, Generic, Keyword, Name, Number, Operator, Punctuation, Text, Whitespace

_NUMBER = [
    (r"(\d+)(\.\.)(\d+)", bygroups(Number, Operator, Number)),    # loop ranges: 0..256
    (r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?\b", Number),
    (r"-?\b(?:inf|nan)\b", Number),
]
_DTYPES = words(("float32", "int64", "int32", "bool", "float", "int", "float4", "const"), prefix=r"\b", suffix=r"\b")
_COMMON_TAIL = [
    (r"\n", Whitespace),
    (r"[ \t]+", Whitespace),
    (r"#.*$", Comment.Single),
    (r"//.*$", Comment.Single),
    (r"(\w+)(=)(?!=)", bygroups(Name.Attribute, Operator)),
    (r"(\w+)(\()", bygroups(Name.Function, Punctuation)),
    (_DTYPES, Keyword.Type),
    include("number"),
    (r"\b(?:True|False|None)\b", Keyword.Constant),
    (r"\w+", Name),
    (r"->|<-|\+=|==|!=|<=|>=|&&|\|\||\.\.|[-+*/%<>=!&|^]", Operator),
    (r"[()\[\],:;.{}@]", Punctuation),
    (r".", Text),
]


class TorchIRLexer(RegexLexer):
    """`rms_norm = rms_norm(x, p_weight, normalized_shape=(2048,), eps=1e-06) -> (1, 32, 2048) float32`"""
    name = "deplokit Torch IR"
    aliases = ["deplokit-torch"]
    filenames = []
    tokens = {
        "root": [
            (r"^([ \t]*)(\w+)(\s*)(=)(?!=)", bygroups(Whitespace, Name.Variable, Whitespace, Operator)),
            *_COMMON_TAIL,
        ],
        "number": _NUMBER,
    }


class TensorIRLexer(RegexLexer):
    """`rstd_bc = rstd[i, na] -> (4, 256) float32`, `ss = sum(sq, axis=-1) -> ...`"""
    name = "deplokit Tensor IR"
    aliases = ["deplokit-tensor"]
    filenames = []
    tokens = {
        "root": [
            (r"^([ \t]*)(\w+)(\s*)(=)(?!=)", bygroups(Whitespace, Name.Variable, Whitespace, Operator)),
            (words(("pad", "na"), prefix=r"\b", suffix=r"\b"), Keyword),
            *_COMMON_TAIL,
        ],
        "number": _NUMBER,
    }


# The start of a Loop- or Tile-IR line: a kernel heading, a value defined (`=`) or folded
# (`<-`), a tensor element stored.
_LOOP_STATEMENT_HEADS = (
    (r"^===.*===$", Generic.Heading),
    (r"^([ \t]*)(\w+)(\s*)(=|<-)(?!=)", bygroups(Whitespace, Name.Variable, Whitespace, Operator)),
    (r"^([ \t]*)(\w+)(\[)", bygroups(Whitespace, Name.Variable, Punctuation)),
)
_LOOP_KEYWORDS = words(("for", "in", "load", "pad", "unroll"), prefix=r"\b", suffix=r"\b")
_LOOP_KINDS = words(("free", "reduce", "register", "epilogue", "prologue"), prefix=r"\b", suffix=r"\b")


class LoopIRLexer(RegexLexer):
    """`=== merged_relu -> relu ===`, `for a0 in 0..16:  # free (M)`, `acc0 <- add(acc0, v1)`."""
    name = "deplokit Loop IR"
    aliases = ["deplokit-loop"]
    filenames = []
    tokens = {
        "root": [
            *_LOOP_STATEMENT_HEADS,
            (_LOOP_KEYWORDS, Keyword),
            *_COMMON_TAIL,
        ],
        "number": _NUMBER,
    }


_TILE_NODES = words(("Tile", "StridedLoop", "Stage", "BufferedStage", "AsyncStage", "AsyncBufferedStage",
                     "TmaBufferedStage", "Combine", "AsyncWait"), suffix=r"\b")


class TileIRLexer(RegexLexer):
    """Loop IR's statements plus Tile IR's nodes: `Tile(axes=(a0:256=THREAD, a1:32=BLOCK)):`."""
    name = "deplokit Tile IR"
    aliases = ["deplokit-tile"]
    filenames = []
    tokens = {
        "root": [
            *_LOOP_STATEMENT_HEADS,
            (_TILE_NODES, Keyword.Type),
            (words(("THREAD", "BLOCK"), prefix=r"\b", suffix=r"\b"), Keyword.Constant),
            (_LOOP_KEYWORDS, Keyword),
            *_COMMON_TAIL,
        ],
        "number": _NUMBER,
    }


_KERNEL_KEYWORDS = words(("for", "if", "else", "barrier", "global", "shared", "cp.async.commit",
                          "cp.async.wait", "cp.async", "tma", "mbarrier.init", "mbarrier.wait", "floats", "on",
                          "count", "phase", "select", "shfl_xor"), prefix=r"\b", suffix=r"\b")


class KernelIRLexer(RegexLexer):
    """Kernel IR's terse pseudo-C: `shared float x_smem[256]`, `acc0 = add(acc0, shfl_xor(acc0, 16))`."""
    name = "deplokit Kernel IR"
    aliases = ["deplokit-kernel"]
    filenames = []
    tokens = {
        "root": [
            (r"^===.*===$", Generic.Heading),
            (r"\b(?:tid|bid)\.[xyz]\b", Name.Builtin),
            (r"^([ \t]*)((?:" + "|".join(("float4", "float", "int64", "int32", "int", "bool")) + r"))(\s+)(\w+)",
             bygroups(Whitespace, Keyword.Type, Whitespace, Name.Variable)),
            (r"^([ \t]*)(\w+)(\s*)(=)(?!=)", bygroups(Whitespace, Name.Variable, Whitespace, Operator)),
            (r"\b\d+B\b", Number),
            (_KERNEL_KEYWORDS, Keyword),
            *_COMMON_TAIL,
        ],
        "number": _NUMBER,
    }


# IR stage -> the lexer class its text is highlighted with.
LEXERS = {
    "torch": TorchIRLexer,
    "tensor": TensorIRLexer,
    "loop": LoopIRLexer,
    "tile": TileIRLexer,
    "kernel": KernelIRLexer,
    "cuda": CudaLexer,
}


def lexer_for(stage: str):
    # Keep the text exactly: no stripped or added newlines.
    return LEXERS[stage](stripnl=False, ensurenl=False)
