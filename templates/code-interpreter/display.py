"""Rich results of the code interpreter, in the shape E2B's SDKs read.

A result is a dict with any of: text (the Jupyter-style text/plain of the
value: IPython's pretty form of builtin containers, repr otherwise, one pair
of surrounding single quotes removed as E2B's server does), html, markdown,
svg, png, jpeg, pdf, latex, json, javascript (from the value's _repr_*_
methods or _repr_mimebundle_), data (a pandas DataFrame as
to_dict(orient="list")), chart (a matplotlib figure's structure, see
chart_of) and extra (mime types of a bundle that have no field of their own).

Everything here is the standard library plus what the value's own module
provides (matplotlib, pandas): nothing is imported unless the value comes
from it. Whatever fails while describing a value leaves that part out; it
never fails the execution.
"""

import base64
import datetime
import math
import re
import sys

WIDTH = 79  # IPython's default line width for pretty printing

MIME_KEYS = (
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"),
    ("text/latex", "latex"),
    ("application/json", "json"),
    ("application/javascript", "javascript"),
)

REPRS = (
    ("_repr_html_", "html"),
    ("_repr_markdown_", "markdown"),
    ("_repr_svg_", "svg"),
    ("_repr_png_", "png"),
    ("_repr_jpeg_", "jpeg"),
    ("_repr_pdf_", "pdf"),
    ("_repr_latex_", "latex"),
    ("_repr_json_", "json"),
    ("_repr_javascript_", "javascript"),
)

BINARY = ("png", "jpeg", "pdf")


def plain_text(text):
    """E2B's text of a result: text/plain without one pair of surrounding
    single quotes ('hello' -> hello; "it's" and ['a'] stay as they are)."""
    if isinstance(text, str) and len(text) >= 2 and text.startswith("'") and text.endswith("'"):
        return text[1:-1]
    return text


def safe_repr(value):
    try:
        return repr(value)
    except Exception as e:  # a broken __repr__ must not end the worker
        return "<repr failed: %s: %s>" % (type(e).__name__, e)


_CONTAINERS = (list, tuple, dict, set, frozenset)


def pretty(value, indent=0, width=WIDTH, seen=None):
    """The text/plain IPython shows for value: its repr, except that a
    builtin list, tuple, dict or set too long for one line has one item a
    line (recursively), sets sorted where their items can be."""
    r = safe_repr(value)
    t = type(value)
    if t not in _CONTAINERS or indent + len(r) <= width or not value:
        return r
    seen = set() if seen is None else seen
    if id(value) in seen:
        return r
    seen.add(id(value))
    try:
        sep = ",\n" + " " * (indent + 1)
        if t is dict:
            parts = []
            for k, v in value.items():
                kr = safe_repr(k)
                parts.append(kr + ": " + pretty(v, indent + 1 + len(kr) + 2, width, seen))
            return "{" + sep.join(parts) + "}"
        if t in (set, frozenset):
            items = list(value)
            try:
                items.sort()
            except Exception:
                pass
            prefix = "frozenset({" if t is frozenset else "{"
            inner = indent + len(prefix)
            body = (",\n" + " " * inner).join(pretty(v, inner, width, seen) for v in items)
            return prefix + body + ("})" if t is frozenset else "}")
        parts = [pretty(v, indent + 1, width, seen) for v in value]
        if t is tuple:
            return "(" + sep.join(parts) + (",)" if len(parts) == 1 else ")")
        return "[" + sep.join(parts) + "]"
    finally:
        seen.discard(id(value))


def json_safe(value, depth=0):
    """value with numpy scalars and arrays as Python numbers and lists,
    dates as ISO strings and NaN and infinities as None (JSON has none)."""
    if depth > 64:
        return None
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.datetime64):
            return str(value.astype("datetime64[s]")) if not np.isnat(value) else None
        if isinstance(value, np.generic):
            return json_safe(value.item(), depth + 1)
        if isinstance(value, np.ndarray):
            return json_safe(value.tolist(), depth + 1)
    pd = sys.modules.get("pandas")
    if pd is not None:
        if value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.isoformat()
    if hasattr(value, "isoformat"):
        try:
            return value.isoformat()
        except Exception:
            pass
    return str(value)


def _encode(key, out):
    if key in BINARY and isinstance(out, (bytes, bytearray)):
        return base64.b64encode(out).decode()
    if key == "json":
        return json_safe(out)
    if isinstance(out, (bytes, bytearray)):
        return out.decode("utf-8", "replace")
    return out


def bundle(value):
    """The result fields (text and the rich formats) of an ordinary value."""
    msg = {"text": plain_text(pretty(value))}
    mb = getattr(type(value), "_repr_mimebundle_", None)
    if mb is not None:
        try:
            data = mb(value)
            if isinstance(data, tuple):
                data = data[0]
            if isinstance(data, dict):
                data = dict(data)
                if "text/plain" in data:
                    msg["text"] = plain_text(data.pop("text/plain"))
                for mime, key in MIME_KEYS:
                    if mime in data:
                        msg[key] = _encode(key, data.pop(mime))
                if data:
                    msg["extra"] = json_safe(data)
        except Exception:
            pass
    for attr, key in REPRS:
        if key in msg:
            continue
        fn = getattr(type(value), attr, None)
        if fn is None:
            continue
        try:
            out = fn(value)
        except Exception:
            continue
        if isinstance(out, tuple):  # (data, metadata)
            out = out[0]
        if out is None:
            continue
        msg[key] = _encode(key, out)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(value, pd.DataFrame):
        try:
            msg["data"] = json_safe(value.to_dict(orient="list"))
        except Exception:
            pass
    return msg


# ---------------------------------------------------------------------------
# matplotlib figures as charts: E2B's chart types (line, scatter, bar, pie,
# box_and_whisker, superchart, unknown) with its fields. Axes are read after
# the figure was drawn (rendered to PNG), when tick labels have their text.


def _num(x):
    """A float without the noise of floating-point arithmetic (12
    significant digits): 84.74999999999999 -> 84.75."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return json_safe(x)
    if not math.isfinite(f):
        return None
    return float("%.12g" % f)


def _point(x):
    if isinstance(x, (datetime.date, datetime.datetime)):
        return x.isoformat()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.datetime64):
        return json_safe(x)
    if isinstance(x, str):
        return x
    return _num(x)


_UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def _unit(label):
    if not label:
        return None
    m = _UNIT.search(label)
    return (m.group(1) or m.group(2)) if m else None


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    if get is not None:
        try:
            return get()
        except Exception:
            return None
    return getattr(axis, "converter", None)


def _is_date_axis(axis):
    conv = _converter(axis)
    return conv is not None and "Date" in type(conv).__name__


def _is_category_axis(axis):
    conv = _converter(axis)
    return conv is not None and "StrCategory" in type(conv).__name__


def _scale(axis, scale, ticks, labels):
    if _is_date_axis(axis):
        return "datetime"
    if scale != "linear":
        return scale
    if _is_category_axis(axis):
        return "categorical"
    return "linear"


def _ticks(axis, ticks):
    if _is_date_axis(axis):
        import matplotlib.dates as mdates
        out = []
        for t in ticks:
            try:
                out.append(mdates.num2date(t).isoformat())
            except Exception:
                out.append(_num(t))
        return out
    return [_num(t) for t in ticks]


def _base(ax, kind):
    title = ax.get_title() or None
    return {"type": kind, "title": title, "elements": []}


def _base2d(ax, kind):
    c = _base(ax, kind)
    xl = ax.get_xlabel() or None
    yl = ax.get_ylabel() or None
    c.update({"x_label": xl, "y_label": yl, "x_unit": _unit(xl), "y_unit": _unit(yl)})
    return c


def _swap_axes(c):
    c["x_label"], c["y_label"] = c["y_label"], c["x_label"]
    c["x_unit"], c["y_unit"] = c["y_unit"], c["x_unit"]


def _point_chart(ax, kind):
    c = _base2d(ax, kind)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        ticks = list(axis.get_ticklocs())
        labels = [t.get_text() for t in axis.get_ticklabels()]
        c[name + "_ticks"] = _ticks(axis, ticks)
        c[name + "_tick_labels"] = labels
        c[name + "_scale"] = _scale(axis, scale, ticks, labels)
    return c


def _label(artist, default):
    label = artist.get_label()
    if not label or label.startswith("_"):
        return default
    return label


def _line_chart(ax):
    c = _point_chart(ax, "line")
    n = 0
    for line in ax.get_lines():
        if _is_grid_line(line):
            continue
        n += 1
        # The data as given (dates, category names), not as plotted.
        pts = [[_point(x), _point(y)] for x, y in zip(line.get_xdata(), line.get_ydata())]
        c["elements"].append({"label": _label(line, "Line %d" % n), "points": pts})
    return c


def _scatter_chart(ax):
    c = _point_chart(ax, "scatter")
    for i, coll in enumerate(ax.collections):
        offsets = coll.get_offsets()
        pts = [[_num(p[0]), _num(p[1])] for p in offsets]
        c["elements"].append({"label": _label(coll, "Dataset %d" % (i + 1)), "points": pts})
    return c


def _tick_label_at(axis, pos):
    """The tick label at position pos of axis, if a tick is there."""
    for loc, lab in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if abs(loc - pos) < 1e-9 * max(1.0, abs(pos)):
            return lab.get_text()
    return None


def _bar_chart(ax):
    c = _base2d(ax, "bar")
    swapped = False
    for gi, container in enumerate(ax.containers):
        rects = [r for r in container if hasattr(r, "get_height")]
        if not rects:
            continue
        orientation = getattr(container, "orientation", None)
        if orientation is None:
            ws = {round(r.get_width(), 9) for r in rects}
            hs = {round(r.get_height(), 9) for r in rects}
            orientation = "horizontal" if len(hs) == 1 and len(ws) > 1 else "vertical"
        group = _label(container, "Group %d" % (gi + 1))
        for r in rects:
            if orientation == "horizontal":
                pos, value, axis = r.get_y() + r.get_height() / 2, r.get_width(), ax.yaxis
            else:
                pos, value, axis = r.get_x() + r.get_width() / 2, r.get_height(), ax.xaxis
            label = _tick_label_at(axis, pos)
            if label is None:
                label = str(_num(pos))
            c["elements"].append({"label": label, "group": group, "value": _num(value)})
        if orientation == "horizontal" and not swapped:
            _swap_axes(c)  # E2B's labels follow the bars: x is the category axis
            swapped = True
    return c


def _pie_chart(ax):
    c = _base(ax, "pie")
    for w in ax.patches:
        if not hasattr(w, "theta1"):
            continue
        # Wedge angles carry float32 noise (323.99999 for 90 %): 4 decimals.
        c["elements"].append({"label": w.get_label(), "angle": round(abs(float(w.theta2) - float(w.theta1)), 4),
                              "radius": _num(w.r)})
    return c


def _box_chart(ax):
    from matplotlib.patches import PathPatch
    c = _base2d(ax, "box_and_whisker")
    boxes = []
    for p in ax.patches:
        if not isinstance(p, PathPatch):
            continue
        v = p.get_path().vertices
        xs, ys = [_num(x) for x in v[:, 0]], [_num(y) for y in v[:, 1]]
        boxes.append({"x0": min(xs), "x1": max(xs), "y0": min(ys), "y1": max(ys)})
    if not boxes:
        return c
    widths = {round(b["x1"] - b["x0"], 9) for b in boxes}
    heights = {round(b["y1"] - b["y0"], 9) for b in boxes}
    vertical = len(widths) == 1 or len(heights) != 1
    if not vertical:
        _swap_axes(c)
    pos_axis = ax.xaxis if vertical else ax.yaxis
    for b in boxes:
        if vertical:
            b["lo"], b["hi"], b["q1"], b["q3"] = b["x0"], b["x1"], b["y0"], b["y1"]
        else:
            b["lo"], b["hi"], b["q1"], b["q3"] = b["y0"], b["y1"], b["x0"], b["x1"]
        b.update({"median": None, "min": b["q1"], "max": b["q3"], "outliers": []})

    def box_at(p0, p1):
        for b in boxes:
            if b["lo"] - 1e-9 <= p0 <= b["hi"] + 1e-9 and b["lo"] - 1e-9 <= p1 <= b["hi"] + 1e-9:
                return b
        return None

    for line in ax.lines:
        xs = [_num(x) for x in line.get_xdata()]
        ys = [_num(y) for y in line.get_ydata()]
        pos, val = (xs, ys) if vertical else (ys, xs)
        if not pos or None in pos or None in val:
            continue
        if line.get_linestyle() in ("None", "none", "", " "):  # fliers: markers only
            for p, v in zip(pos, val):
                b = box_at(p, p)
                if b is not None:
                    b["outliers"].append(v)
            continue
        if len(pos) != 2:
            continue
        b = box_at(pos[0], pos[1])
        if b is None:
            continue
        if val[0] == val[1]:
            # A median spans the box; a cap is narrower.
            if abs(abs(pos[1] - pos[0]) - (b["hi"] - b["lo"])) < 1e-9 and b["q1"] <= val[0] <= b["q3"]:
                b["median"] = val[0]
            continue
        lo, hi = min(val), max(val)
        if hi == b["q1"]:
            b["min"] = lo
        elif lo == b["q3"]:
            b["max"] = hi
    for b in boxes:
        center = (b["lo"] + b["hi"]) / 2
        label = _tick_label_at(pos_axis, center)
        c["elements"].append({
            "label": label if label is not None else str(_num(center)),
            "min": b["min"],
            "first_quartile": b["q1"],
            "median": b["median"] if b["median"] is not None else b["q1"],
            "third_quartile": b["q3"],
            "max": b["max"],
            "outliers": b["outliers"],
        })
    return c


def _is_grid_line(line):
    """A line matplotlib draws for a grid (2 points spanning the axes)."""
    try:
        xs, ys = list(line.get_xdata()), list(line.get_ydata())
    except Exception:
        return False
    if len(xs) != 2:
        return False
    return line.get_label().startswith("_") and (
        list(xs) == [0, 1] and ys[0] == ys[1] or list(ys) == [0, 1] and xs[0] == xs[1]
    ) and getattr(line, "get_transform", None) is not None and "Blended" in type(line.get_transform()).__name__


def _chart_kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text
    children = getattr(ax, "_children", None)
    if children is None:
        children = list(ax.lines) + list(ax.patches) + list(ax.collections)
    objs = [o for o in children if not isinstance(o, Text)]
    if all(isinstance(o, Line2D) for o in objs):
        return "line"
    if all(isinstance(o, (PathPatch, Line2D)) for o in objs):
        return "box_and_whisker"
    objs = [o for o in objs if not (isinstance(o, Line2D) and _is_grid_line(o))]
    if all(isinstance(o, PathCollection) for o in objs):
        return "scatter"
    if all(isinstance(o, Wedge) for o in objs):
        return "pie"
    if all(isinstance(o, Rectangle) for o in objs):
        return "bar"
    return "unknown"


_BUILDERS = {
    "line": _line_chart,
    "scatter": _scatter_chart,
    "bar": _bar_chart,
    "pie": _pie_chart,
    "box_and_whisker": _box_chart,
}


def _axes_chart(ax):
    kind = _chart_kind(ax)
    build = _BUILDERS.get(kind)
    if build is None:
        return _base(ax, "unknown")
    return build(ax)


def chart_of(fig):
    """The structure of a drawn matplotlib figure as E2B's chart, or None
    (no axes, or it could not be read)."""
    try:
        axes = fig.get_axes()
        if not axes:
            return None
        if len(axes) == 1:
            return json_safe(_axes_chart(axes[0]))
        sup = getattr(fig, "_suptitle", None)
        title = sup.get_text() if sup is not None else None
        return json_safe({"type": "superchart", "title": title or None,
                          "elements": [_axes_chart(ax) for ax in axes]})
    except Exception as e:
        print("airlock-code-interpreter: could not read the chart of a figure: %s: %s" % (type(e).__name__, e),
              file=sys.stderr)
        return None
