"""What a reader of a matplotlib figure would see wrong, measured on the drawn figure: text past
the figure's edge, a label run out of its axes, a legend or a footnote over a plot."""

from __future__ import annotations

from typing import Any


def _shown(text: Any) -> bool:
    return text.get_visible() and bool(text.get_text().strip())


def _inside(box: Any, frame: Any, slack: float = 1.0) -> bool:
    return (box.x0 >= frame.x0 - slack and box.x1 <= frame.x1 + slack
            and box.y0 >= frame.y0 - slack and box.y1 <= frame.y1 + slack)


def layout_problems(fig: Any) -> list[str]:
    """Each problem as a sentence; [] when the figure reads cleanly."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    plots = [ax for ax in fig.axes if ax.axison]
    problems = []
    for ax in plots:  # its title, labels and the ticks drawn
        if not _inside(ax.get_tightbbox(renderer), fig.bbox):
            problems.append(f"the plot {ax.get_title()!r} runs past the figure's edge")
        labels = [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts if _shown(t)]
        problems += [f"{text!r} runs past its axes" for text, box in labels
                     if not _inside(box, ax.bbox)]
        problems += [f"{a!r} overlaps {b!r}" for i, (a, box) in enumerate(labels)
                     for b, other in labels[i + 1:] if box.overlaps(other)]
    legends = [*fig.legends, *(ax.get_legend() for ax in plots if ax.get_legend())]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        if not _inside(box, fig.bbox):
            problems.append("a legend runs past the figure's edge")
        problems += [f"a legend covers the plot {ax.get_title()!r}" for ax in plots
                     if box.overlaps(ax.bbox)]
    for text in [t for t in fig.texts if _shown(t)]:  # titles, footnotes, figure-wide labels
        box = text.get_window_extent(renderer)
        if not _inside(box, fig.bbox):
            problems.append(f"{text.get_text()!r} runs past the figure's edge")
        problems += [f"{text.get_text()!r} overlaps the plot {ax.get_title()!r}"
                     for ax in plots if box.overlaps(ax.get_tightbbox(renderer))]
    return problems
