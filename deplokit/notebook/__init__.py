"""deplokit in Jupyter: rich renderings of every IR, trace step and Compilation, the pass
stepper widget and plots (the `notebook` extra: pygments, graphviz, ipywidgets, matplotlib).

Importing this package registers the renderers with deplokit.display, which imports it by
itself at the first display; nothing here is needed for `import deplokit`."""
from .reprs import register_all
from .sass_view import register as register_sass

register_all()
register_sass()
