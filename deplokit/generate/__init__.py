"""Generation: prefill and decode programs over a static KV cache (docs/generation.md)."""
from .programs import CacheFullError, Decoder, PromptTooLongError, Session, build_decoder

__all__ = ["CacheFullError", "Decoder", "PromptTooLongError", "Session", "build_decoder"]
