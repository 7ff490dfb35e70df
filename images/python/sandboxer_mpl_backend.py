"""matplotlib's backend in sandboxer's python image (MPLBACKEND, set by
sandboxer_figures when figures are captured): Agg, whose show() saves every
open figure for the agent instead of opening a window."""
from matplotlib.backend_bases import FigureManagerBase as FigureManager  # noqa: F401
from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas  # noqa: F401

import atexit

import sandboxer_figures

# Figures still open at exit are saved. Registered here, after pyplot's own
# atexit (which closes every figure) and so run before it.
atexit.register(sandboxer_figures.flush)


def show(*args, **kwargs):
    sandboxer_figures.flush()
