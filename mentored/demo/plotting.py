r"""The figures of the notebooks and benchmarks: one colour per divergence, and a save that checks
what a reader will see.

- :data:`DIVERGENCE_COLORS`: the colour of each built-in divergence ``f`` in every figure, so that a
  curve of ``D_f(π‖p) ≤ ε`` keeps its colour from panel to panel and from figure to figure (black
  and grey stay free for the references: the target ``p``, lossless verification).
- :func:`figure_problems`: what a reader of a drawn figure would miss: text cut by the edge of the
  canvas, a data point under a legend, a curve hidden under another one drawn over it.
- :func:`save_figure`: refuses a figure with such a problem, else writes it with the text it draws
  (titles, axis labels, legends) in the PNG's ``Description`` chunk and the script that drew it in
  ``Source``; :func:`figure_text` reads them back. Rasterised text cannot be searched, so this record
  is what lets a test check that a figure cites only files and sections that exist.

matplotlib is imported only inside the functions that draw (``pip install matplotlib``).
"""

from __future__ import annotations

from pathlib import Path

from ..divergences import BUILTIN_NAMES

__all__ = ["DIVERGENCE_COLORS", "divergence_color", "figure_problems", "figure_text", "save_figure"]

# matplotlib's default colours (tab10) in the order of BUILTIN_NAMES, so that a plot that loops
# over BUILTIN_NAMES with the default colour cycle already agrees with this map.
_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
DIVERGENCE_COLORS = dict(zip(BUILTIN_NAMES, _TAB10))

_SOLID = ("-", "solid")
_NO_MARKER = (None, "None", "none", "", " ")


def divergence_color(name: str) -> str:
    """The colour of the built-in divergence ``name`` (a key of :data:`DIVERGENCE_COLORS`)."""
    try:
        return DIVERGENCE_COLORS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"divergence_color: name={name!r} is not a built-in divergence; pass one of {sorted(DIVERGENCE_COLORS)} "
            "or give a custom divergence's curve a colour of its own"
        ) from None


def _drawn_texts(fig):
    """(where, text artist) for every non-empty visible text the figure draws except tick labels."""
    out = [("suptitle", getattr(fig, "_suptitle", None))]
    out += [("figure text", t) for t in fig.texts]
    for leg in fig.legends:
        out += [("figure legend", t) for t in [leg.get_title(), *leg.get_texts()]]
    for i, ax in enumerate(fig.axes):
        where = f"axes {i}"
        out += [(f"{where} title", t) for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None))]
        out += [(f"{where} x label", ax.xaxis.label), (f"{where} y label", ax.yaxis.label)]
        out += [(f"{where} text", t) for t in ax.texts]
        leg = ax.get_legend()
        if leg is not None:
            out += [(f"{where} legend", t) for t in [leg.get_title(), *leg.get_texts()]]
    return [(w, t) for w, t in out if t is not None and t.get_visible() and t.get_text().strip()]


def _points(artist):
    """The display coordinates of the data points an artist marks (markers, scatter), or None."""
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D

    if isinstance(artist, Line2D):
        if artist.get_marker() in _NO_MARKER or not artist.get_visible():
            return None
        xy = np.asarray(artist.get_xydata(), dtype=float)
        return artist.get_transform().transform(xy) if xy.size else None
    if isinstance(artist, PathCollection) and artist.get_visible():
        xy = np.asarray(artist.get_offsets(), dtype=float)
        return artist.get_offset_transform().transform(xy) if xy.size else None
    return None


def _polyline(line):
    import numpy as np

    xy = np.asarray(line.get_xydata(), dtype=float)
    xy = xy[np.isfinite(xy).all(axis=1)]
    return line.get_transform().transform(xy) if len(xy) else xy


def _inside(box, xy):
    """Which of the display points ``xy`` lie inside the bbox ``box``."""
    return (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)


def _distance_to_polyline(points, poly):
    """Distance (display px) from each point to the polyline ``poly``."""
    import numpy as np

    if len(poly) == 1:
        return np.hypot(*(points - poly[0]).T)
    a, b = poly[:-1], poly[1:]
    ab = b - a
    length2 = np.maximum((ab**2).sum(axis=1), 1e-12)
    t = np.clip(((points[:, None, :] - a[None]) * ab[None]).sum(axis=2) / length2[None], 0.0, 1.0)
    nearest = a[None] + t[..., None] * ab[None]
    return np.sqrt(((points[:, None, :] - nearest) ** 2).sum(axis=2)).min(axis=1)


def _shows_through(under, over) -> bool:
    """Whether the line ``under`` stays visible where ``over`` is drawn over it: through the gaps of
    a broken line of another pattern, or by markers that ``over``'s do not cover."""
    style = over.get_linestyle()
    if style not in _SOLID and style != under.get_linestyle():
        return True
    if under.get_marker() in _NO_MARKER:
        return False
    if over.get_marker() in _NO_MARKER or over.get_marker() != under.get_marker():
        return True
    return under.get_markersize() > over.get_markersize() + 1.0


def _label(artist) -> str:
    label = artist.get_label()
    return label if label and not label.startswith("_") else "an unlabelled curve"


def figure_problems(fig, *, hidden_share: float = 0.9) -> list[str]:
    """What a reader of ``fig`` would miss, one sentence each (empty: nothing):

    - a text (title, axis label, legend entry) or a tick label that reaches past the canvas;
    - a data point (a marker or a scatter point inside its axes) under a legend of its axes or of the figure;
    - a curve of at least 3 vertices whose visible vertices lie, for a share ``hidden_share`` or more, within
      the line width of a curve drawn over it, unless the one underneath shows through: the one on
      top is broken (dashed, dotted) in another pattern, or the one underneath has markers that
      differ in shape or are larger.
    """
    import numpy as np

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    problems = []

    def outside(bb):
        return bb.x0 < -0.5 or bb.y0 < -0.5 or bb.x1 > width + 0.5 or bb.y1 > height + 0.5

    for where, text in _drawn_texts(fig):
        if outside(text.get_window_extent(renderer)):
            problems.append(f"{where} {text.get_text()!r} is cut by the edge of the canvas")
    tight = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    if not problems and outside(tight):
        problems.append("tick labels or another artist reach past the edge of the canvas")

    legends = [(leg, list(fig.axes)) for leg in fig.legends]
    legends += [(ax.get_legend(), [ax]) for ax in fig.axes if ax.get_legend() is not None]
    for leg, axes in legends:
        if not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer).padded(-1.0)
        for ax in axes:
            inside_axes = ax.bbox.padded(0.5)
            for artist in [*ax.lines, *ax.collections]:
                xy = _points(artist)
                if xy is None:
                    continue
                covered = _inside(inside_axes, xy) & _inside(box, xy)
                if covered.any():
                    problems.append(f"the legend covers {int(covered.sum())} point(s) of {_label(artist)!r} "
                                    f"in axes {fig.axes.index(ax)} ({ax.get_title()!r})")

    px_per_pt = fig.dpi / 72.0
    for i, ax in enumerate(fig.axes):
        lines = [ln for ln in ax.lines if ln.get_visible() and len(ln.get_xydata()) >= 3]
        order = sorted(range(len(lines)), key=lambda k: (lines[k].get_zorder(), k))
        rank = {id(lines[k]): r for r, k in enumerate(order)}
        for under in lines:
            pts = _polyline(under)
            pts = pts[_inside(ax.bbox, pts)] if len(pts) else pts
            if len(pts) == 0:
                continue
            for over in lines:
                if rank[id(over)] <= rank[id(under)] or _shows_through(under, over):
                    continue
                poly = _polyline(over)
                if len(poly) == 0:
                    continue
                reach = 0.5 * (over.get_linewidth() + under.get_linewidth()) * px_per_pt
                if np.mean(_distance_to_polyline(pts, poly) <= reach) >= hidden_share:
                    problems.append(f"{_label(under)!r} hides under {_label(over)!r} in axes {i} ({ax.get_title()!r}): "
                                    "draw the one on top dashed, or give the one underneath markers of another shape or size")
                    break
    return problems


def save_figure(fig, path, *, source: str, dpi: int = 110) -> Path:
    """Write ``fig`` to the PNG ``path`` once :func:`figure_problems` finds nothing, with its drawn text
    (one line per title, axis label and legend entry) in the ``Description`` chunk and ``source``
    (the repository path of the script that drew it) in ``Source``. Returns the path."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"save_figure: source={source!r} must name the script that draws the figure, e.g. 'benchmarks/neural.py'")
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"save_figure: path={str(path)!r} must end in .png (the text record is a PNG chunk)")
    problems = figure_problems(fig)
    if problems:
        raise ValueError(
            f"save_figure: the figure for {str(path)!r} hides something from its reader:\n  - " + "\n  - ".join(problems)
            + "\nshorten or wrap the text (or widen the figure), move the legend (loc=..., or outside the axes), "
            "or draw overlapping curves with different line styles or markers"
        )
    lines = []
    for _, text in _drawn_texts(fig):
        if text.get_text() not in lines:
            lines.append(text.get_text())
    fig.savefig(path, dpi=dpi, metadata={"Description": "\n".join(lines), "Source": source})
    return path


def figure_text(path) -> dict[str, str]:
    """The text chunks (``tEXt``, ``zTXt``, ``iTXt``) of the PNG at ``path``, keyword → text (read by
    Pillow, which matplotlib brings)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                raise ValueError(f"figure_text: path={str(path)!r} is a {image.format} file, not a PNG")
            image.load()  # text chunks after the image data are read with it
            return dict(image.text)
    except UnidentifiedImageError:
        raise ValueError(f"figure_text: path={str(path)!r} is not a PNG file (no PNG signature)") from None
