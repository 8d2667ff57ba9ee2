"""`deplokit generate MODEL --prompt TEXT`: greedy generation through deplokit's kernels,
the text streamed to stdout as it is produced, then the timings (and with --check, how many
tokens agree with transformers' own greedy generate) on stderr."""
from __future__ import annotations

import sys

from .parser import usage_error


def cmd_generate(args) -> int:
    if not args.prompt.strip():
        raise usage_error(args, "--prompt is empty")
    # Loaded here, not at the top: torch, transformers and the model only when the command runs.
    from ..generate.lm import agreement, load_lm
    lm = load_lm(args.model, max_length=args.max_length, target=args.target, dtype=args.dtype)
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
        print(f"check: {same} of {len(expected)} tokens agree with transformers' greedy generate in "
              f"{args.dtype} ({verdict})",
              file=sys.stderr)
        if same != len(expected) or len(produced) != len(expected):
            return 1
    return 0
