"""What every plot of a simulation shares: matplotlib checked and imported lazily
(``pip install 'ratekeeper[plot]'``), a figure with the same SVG ids on every run, series ids,
and saving.

Figures are made with ``matplotlib.figure.Figure`` (no pyplot, no global state), and matplotlib
is imported only when a plot is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.core.periods import spoken

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def require() -> None:
    """Raise ``MissingExtraError`` naming the pip command unless matplotlib can be imported."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None


def new_figure() -> Figure:
    """A figure of 8 by 4.5 inches, laid out by matplotlib's constrained layout."""
    require()
    import matplotlib
    from matplotlib.figure import Figure

    matplotlib.rcParams["svg.hashsalt"] = "ratekeeper"  # the same ids on every run
    return Figure(figsize=(8, 4.5), layout="constrained")


def series_id(prefix: str, label: str) -> str:
    """The ``gid`` of a series: ``prefix-label`` with anything but letters, digits, ``_`` and
    ``-`` replaced by ``_``."""
    clean = "".join(c if c.isalnum() or c in "_-" else "_" for c in label)
    return f"{prefix}-{clean}"


def save(figure: Figure, folder: Path, name: str, image: str) -> Path:
    """Write ``figure`` as ``folder/name.image`` (``svg``, ``pdf`` or ``png``); the path."""
    path = folder / f"{name}.{image}"
    metadata: dict[str, Any] = {"Date": None} if image in ("svg", "pdf") else {}
    figure.savefig(path, format=image, metadata=metadata)
    return path


def seconds(value: float) -> str:
    """Seconds as a label: ``0.05 s``, ``2 s``, ``2 minutes``."""
    return f"{value:g} s" if value < 60 else spoken(value)
