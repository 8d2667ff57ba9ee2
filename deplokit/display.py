"""A neutral hook between deplokit's objects and whatever can draw them richly.

IR classes, trace steps and the Compilation inherit `Displayable`, whose
`_repr_mimebundle_` (the method Jupyter calls) asks this registry for a renderer. The
renderers live in `deplokit.notebook`, which registers them when it is imported; this
module imports it lazily, at the first display, so the IR never imports the notebook layer
and knows nothing of HTML. Without the notebook extra (pygments, graphviz, ...) or with
no renderer for a type, the bundle is just `text/plain`: the object's canonical text."""
from __future__ import annotations

import importlib
from typing import Callable

# Packages imported once, at the first display, so that they can register renderers.
RENDERER_PACKAGES = ("deplokit.notebook",)

# type -> fn(obj) -> {mime type: data}; looked up along the object's MRO.
_RENDERERS: dict[type, Callable[[object], dict]] = {}
_loaded = False


def register(cls: type, renderer: Callable[[object], dict]) -> None:
    """Make `renderer(obj)` draw instances of `cls` (and of its subclasses)."""
    _RENDERERS[cls] = renderer


def renderer_for(obj) -> Callable[[object], dict] | None:
    _load_renderers()
    for cls in type(obj).__mro__:
        if cls in _RENDERERS:
            return _RENDERERS[cls]
    return None


def _load_renderers() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in RENDERER_PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError:     # the notebook extra is not installed: text only
            pass


def plain_text(obj) -> str:
    """The canonical text: what `str()` prints for IR objects."""
    return str(obj)


def mimebundle(obj, include=None, exclude=None) -> dict:
    """{mime type: data}, always with text/plain; filtered by Jupyter's include/exclude."""
    bundle = {}
    fn = renderer_for(obj)
    if fn is not None:
        try:
            bundle = dict(fn(obj))
        except ImportError:     # an optional drawing library is missing: text only
            bundle = {}
    bundle.setdefault("text/plain", plain_text(obj))
    if include:
        bundle = {k: v for k, v in bundle.items() if k in include}
    if exclude:
        bundle = {k: v for k, v in bundle.items() if k not in exclude}
    return bundle


class Displayable:
    """Mixin: the object renders through the registry above in Jupyter, and at a plain
    Python prompt as its canonical multi-line text (not a dataclass's one-line repr)."""
    __slots__ = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Put into the class's own dict before @dataclass runs, which then keeps it (it adds
        # a __repr__ only where the class body defines none); a class's own __repr__ stays.
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Displayable.__repr__

    def __repr__(self) -> str:
        return plain_text(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return mimebundle(self, include, exclude)
