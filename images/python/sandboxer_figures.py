"""Figures for sandboxer: what a python job or REPL cell plots comes back to
the agent as an image.

Loaded at every interpreter start by sandboxer-figures.pth, and active only
when the server set SANDBOXER_FIGURES_DIR (run_script and sessions in
python). It then:
  - makes matplotlib use a non-interactive backend (Agg, in
    sandboxer_mpl_backend.py) whose show() saves every open figure;
  - saves figures still open when the interpreter exits, and, in the REPL,
    after each cell (sys.ps1 is asked for the prompt once per cell);
  - makes PIL.Image.Image.show() save the image.
Each image is a PNG of at most MAX_SIDE pixels a side and MAX_BYTES bytes,
written whole (renamed into place) into the directory; the sandbox's
supervisor sends them to the server. Importing this module imports neither
matplotlib nor PIL.
"""
import io
import os
import sys

MAX_SIDE = 1600
MAX_BYTES = 1 << 20
BACKEND = "module://sandboxer_mpl_backend"  # sandboxer_mpl_backend.py
_dir = os.environ.get("SANDBOXER_FIGURES_DIR", "")
_count = 0
# The image's prebuilt matplotlib font cache, and where it is copied to.
MPL_SEED = "/usr/local/share/sandboxer/matplotlib"


def _seed_matplotlib():
    """Copies the font cache to a fresh (tmpfs) MPLCONFIGDIR: a stat per start.

    With os alone: importing shutil (fnmatch, re, enum) would add ~7 ms to
    every python job's first start in a sandbox. The seed is flat files."""
    d = os.environ.get("MPLCONFIGDIR", "")
    if not d.startswith("/tmp/") or os.path.exists(d):
        return
    try:
        names = os.listdir(MPL_SEED)
        os.makedirs(d)
        for name in names:
            with open(os.path.join(MPL_SEED, name), "rb") as src, \
                    open(os.path.join(d, name), "wb") as dst:
                dst.write(src.read())
    except OSError:
        pass  # matplotlib builds its cache itself


def _write(png):
    global _count
    os.makedirs(_dir, exist_ok=True)
    _count += 1
    path = os.path.join(_dir, "figure-%d-%03d.png" % (os.getpid(), _count))
    with open(path + ".part", "wb") as f:
        f.write(png)
    os.rename(path + ".part", path)


def save_figure(fig):
    """Saves one matplotlib figure, scaled down to the bounds."""
    w, h = fig.get_size_inches()
    dpi = min(float(fig.dpi), MAX_SIDE / max(w, h, 1e-3))
    for _ in range(8):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        if buf.tell() <= MAX_BYTES:
            _write(buf.getvalue())
            return
        dpi *= 0.7


def flush():
    """Saves and closes every open matplotlib figure."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None or not _dir:
        return
    for num in plt.get_fignums():
        try:
            save_figure(plt.figure(num))
        except Exception as e:  # a figure that cannot render is reported, not fatal
            print("sandboxer: figure %s not saved: %s" % (num, e), file=sys.stderr)
    plt.close("all")


def save_image(im):
    """Saves a PIL image, scaled down to the bounds."""
    im = im.copy()
    if im.mode not in ("RGB", "RGBA", "L", "LA", "P", "1"):
        im = im.convert("RGBA")
    im.thumbnail((MAX_SIDE, MAX_SIDE))
    for _ in range(8):
        buf = io.BytesIO()
        im.save(buf, format="PNG", optimize=True)
        if buf.tell() <= MAX_BYTES:
            _write(buf.getvalue())
            return
        im = im.resize((max(1, int(im.width * 0.7)), max(1, int(im.height * 0.7))))


class _Prompt(str):
    """The REPL's sys.ps1: each time the prompt is printed, a cell ended."""

    def __str__(self):
        flush()
        return str.__str__(self)


class _PILFinder:
    """Patches PIL.Image.Image.show once PIL.Image is imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "PIL.Image":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            module.Image.show = lambda self, *a, **k: save_image(self)
            if self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = patched
        return spec


def activate():
    _seed_matplotlib()
    if not _dir:
        return
    os.environ.setdefault("MPLBACKEND", BACKEND)
    sys.ps1 = _Prompt(getattr(sys, "ps1", ">>> "))
    sys.meta_path.insert(0, _PILFinder())
