"""The report's curves as SVG, drawn with the standard library alone: what curves.py draws where matplotlib is not
installed (a login node's or a laptop's python3 with only pyyaml and jinja2, as after `make demo`), so a report is
always made. The same panels, colours and markers as the matplotlib figures; fewer niceties (no tick thinning by
font size, no legend placement by the data)."""
import html
import math
from typing import List, Sequence, Tuple

WIDTH = 750  # curves.FIGSIZE at curves.DPI: the PNGs' size, so the page lays out the same either way
PANEL_HEIGHT = 240
SINGLE_HEIGHT = 320
MARGIN = {"left": 72, "right": 16, "top": 30, "bottom": 40}
# matplotlib's default colour cycle (tab10): a curve has the same colour in either drawing
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
FONT = 'font-family="DejaVu Sans,Arial,sans-serif"'
MARKED_UP_TO = 30  # as curves.draw: markers where a curve has few points (per-epoch validation)

Line = Tuple[str, Sequence[float], Sequence[float]]  # label, x, y
Panel = Tuple[str, List[Line]]  # y label, its lines


def figure(panels: Sequence[Panel], title: str, x_label: str) -> bytes:
    """Panels stacked top to bottom, one shared x label under the last; the title over the first."""
    height = SINGLE_HEIGHT if len(panels) == 1 else PANEL_HEIGHT * len(panels)
    each = height / len(panels)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="11">',
             f'<rect width="{WIDTH}" height="{height}" fill="white"/>']
    for i, (y_label, lines) in enumerate(panels):
        last = i == len(panels) - 1
        parts.append(panel_svg(i * each, each, y_label, lines, title if i == 0 else "", x_label if last else ""))
    parts.append("</svg>")
    return "\n".join(parts).encode("utf-8")


def panel_svg(top: float, height: float, y_label: str, lines: List[Line], title: str, x_label: str) -> str:
    box = (MARGIN["left"], top + MARGIN["top"], WIDTH - MARGIN["right"], top + height - MARGIN["bottom"])
    finite = [[(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)] for _, xs, ys in lines]
    x_ticks = ticks([x for points in finite for x, _ in points])
    y_ticks = ticks([y for points in finite for _, y in points])
    place = placer(box, x_ticks, y_ticks)
    out = [axes_svg(box, x_ticks, y_ticks, place)]
    for i, points in enumerate(finite):
        out.append(line_svg(points, COLOURS[i % len(COLOURS)], place))
    out.append(legend_svg(box, [label for label, _, _ in lines]))
    mid_x, mid_y = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    out.append(text(16, mid_y, y_label, "middle", f' transform="rotate(-90 16 {mid_y:.1f})"'))
    if x_label:
        out.append(text(mid_x, box[3] + 32, x_label, "middle"))
    if title:
        out.append(text(mid_x, box[1] - 10, title, "middle", ' font-size="12"'))
    return "\n".join(out)


def ticks(values: List[float], wanted: int = 5) -> List[float]:
    """Round numbers spanning the values (1, 2 or 5 times a power of ten apart), as an axis shows them."""
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-12 * max(1.0, abs(high)):  # one value: a band around it
        low, high = low - max(abs(low) * 0.05, 0.5), high + max(abs(high) * 0.05, 0.5)
    raw = (high - low) / wanted
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [round(k * step, 12) for k in range(first, last + 1)]


def placer(box, x_ticks: List[float], y_ticks: List[float]):
    """Data coordinates to the panel's pixels: the ticks' range fills the box."""
    left, top, right, bottom = box

    def place(x: float, y: float) -> Tuple[float, float]:
        fx = (x - x_ticks[0]) / (x_ticks[-1] - x_ticks[0])
        fy = (y - y_ticks[0]) / (y_ticks[-1] - y_ticks[0])
        return left + fx * (right - left), bottom - fy * (bottom - top)
    return place


def axes_svg(box, x_ticks: List[float], y_ticks: List[float], place) -> str:
    left, top, right, bottom = box
    out = [f'<rect x="{left}" y="{top:.1f}" width="{right - left}" height="{bottom - top:.1f}" fill="none" '
           f'stroke="#222" stroke-width="0.8"/>']
    for x in x_ticks:
        px = place(x, y_ticks[0])[0]
        out.append(f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{bottom:.1f}" stroke="#ccc" '
                   f'stroke-width="0.6"/>')
        out.append(text(px, bottom + 14, number(x), "middle"))
    for y in y_ticks:
        py = place(x_ticks[0], y)[1]
        out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#ccc" stroke-width="0.6"/>')
        out.append(text(left - 5, py + 4, number(y), "end"))
    return "\n".join(out)


def line_svg(points: List[Tuple[float, float]], colour: str, place) -> str:
    if not points:
        return ""
    placed = [place(x, y) for x, y in points]
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in placed)
    out = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>']
    if len(points) <= MARKED_UP_TO:
        out += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"/>' for px, py in placed]
    return "\n".join(out)


def legend_svg(box, labels: List[str]) -> str:
    """Top right inside the axes, one row per line: its colour, its label."""
    width = 40 + 6.5 * max((len(label) for label in labels), default=0)
    left, top = box[2] - width - 8, box[1] + 8
    out = [f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{8 + 14 * len(labels)}" fill="white" '
           f'fill-opacity="0.8" stroke="#ccc"/>']
    for i, label in enumerate(labels):
        y = top + 12 + 14 * i
        colour = COLOURS[i % len(COLOURS)]
        out.append(f'<line x1="{left + 6:.1f}" y1="{y:.1f}" x2="{left + 26:.1f}" y2="{y:.1f}" stroke="{colour}" '
                   f'stroke-width="1.5"/>')
        out.append(text(left + 32, y + 4, label, "start", ' font-size="10"'))
    return "\n".join(out)


def number(value: float) -> str:
    return f"{value:.6g}"


def text(x: float, y: float, words: str, anchor: str, extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" fill="#222"{extra}>'
            f'{html.escape(words)}</text>')
