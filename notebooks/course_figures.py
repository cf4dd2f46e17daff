"""How the chapters' figures reach the page: sharp on a 2x screen, with their smallest text recorded.

notebooks/matplotlibrc names `crisp_and_measured` as a figure hook, so pyplot calls it for every figure a
chapter makes. It has IPython show a figure as a PNG drawn at twice the figure's dpi and displayed at
half its pixel width (what `InlineBackend.figure_formats = ['retina']` does, without a height, so a
figure shrunk to a narrow column keeps its proportions), and writes into the PNG the size of its
smallest text in points and the dpi it was drawn at. tests/test_book_browser.py turns those into pixels
as the page shows the figure.
"""

from binascii import b2a_base64
from io import BytesIO

from matplotlib.figure import Figure
from matplotlib.text import Text

SMALLEST = "Course smallest text (pt)"
SMALLEST_TEXT = "Course smallest text"
DPI = "Course dpi"


def smallest_text(fig: Figure) -> tuple[float, str]:
    """(size in points, the text) of the smallest non-empty visible text of `fig`, drawn as it will be."""
    fig.draw_without_rendering()  # the tick labels exist once the figure is laid out
    texts = [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and t.get_alpha() != 0
    ]
    if not texts:
        return 0.0, ""
    t = min(texts, key=Text.get_fontsize)
    return t.get_fontsize(), t.get_text().strip()[:60]


def png(fig: Figure) -> tuple[str, dict] | None:
    """The figure as IPython's display shows it: base64 PNG at 2 x dpi, displayed half as wide."""
    if not fig.axes and not fig.lines:
        return None
    size, text = smallest_text(fig)
    dpi = 2 * fig.dpi
    raw = BytesIO()
    fig.canvas.print_figure(
        raw,
        format="png",
        dpi=dpi,
        bbox_inches="tight",
        facecolor=fig.get_facecolor(),
        edgecolor=fig.get_edgecolor(),
        metadata={SMALLEST: f"{size:g}", SMALLEST_TEXT: text, DPI: f"{dpi:g}"},
    )
    data = raw.getvalue()
    width = int.from_bytes(data[16:20], "big")  # the IHDR chunk's width
    return b2a_base64(data, newline=False).decode("ascii"), {"width": width // 2}


def crisp_and_measured(fig: Figure) -> None:
    """matplotlib's figure hook: show `fig` (and every later figure) through `png`, in IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, png)
