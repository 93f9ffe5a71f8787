"""Figures of training runs and of GR's analyses, as PNG files: each
``plot_*`` function takes the data (lists and dicts of numbers), draws one of
GR's figures or tables, and writes it.

Figures are drawn with matplotlib's Agg canvas (no display, no pyplot state)
and written atomically: rendered to a temporary file next to ``path``, then
moved over it, so an interrupted call never leaves a half-written PNG.

Example (a run folder's logs, read with :mod:`keras_gresnet.training`)::

    from keras_gresnet import plots, training
    plots.plot_history(training.read_history("run"), "run/history.png")
    plots.plot_gates_over_epochs(training.read_gates("run"), "run/gates.png")
"""

import math
import numbers

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from keras_gresnet._checks import (
    check_mapping, check_optional_text, check_png_path, check_series,
)
from keras_gresnet.files import atomic_path

# History series prefixes, in plotting order: training, validation, test.
SPLITS = {"": "train", "val_": "validation", "test_": "test"}
# Up to this many blocks get a legend entry each; more get a colorbar.
_MAX_LEGEND = 10
_DPI = 100


# --------------------------------------------------------------------------
# Argument checks (before any drawing).


def _check_history(history, argument="history"):
    """A history dict whose series all have one value per epoch; ``epoch``
    defaults to ``0, 1, ...``."""
    check_mapping(history, argument)
    missing = [c for c in ("loss", "accuracy") if c not in history]
    if missing:
        raise ValueError(f"{argument} has no {', '.join(missing)} series")
    if "epoch" in history:
        epochs = history["epoch"]
    elif hasattr(history["loss"], "__len__"):
        epochs = range(len(history["loss"]))
    else:
        raise ValueError(f"{argument}: loss must be a sequence of numbers")
    checked = {
        column: check_series(epochs, values, argument, "epoch", column)[1]
        for column, values in history.items()
    }
    checked["epoch"] = [float(e) for e in epochs]
    return checked


def _error_percent(accuracies):
    return [100.0 * (1.0 - a) for a in accuracies]


# --------------------------------------------------------------------------
# Figure setup and atomic save.


def _figure(panels=1, title=None, size=(6.4, 4.2)):
    """A pyplot-free Agg figure with ``panels`` axes side by side."""
    fig = Figure(figsize=(size[0] * panels, size[1]), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    if title:
        fig.suptitle(title)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        # Epochs, blocks and depths are counts: no ticks at 0.5.
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig, axes


def _save(fig, path):
    """Write ``fig`` to ``path`` as a PNG, atomically."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=_DPI)
    return path


def _block_colors(indices):
    """A viridis colour per block index, and the matching colour scale."""
    scale = ScalarMappable(Normalize(min(indices), max(max(indices), min(indices) + 1)), "viridis")
    return [scale.to_rgba(i) for i in indices], scale


# --------------------------------------------------------------------------
# Plots.


def plot_history(history, path, title=None):
    """Training curves of one run (GR Figure 4 style): loss (log scale) and
    error % = ``100 (1 - accuracy)`` vs epoch, for training and for every
    ``val_`` / ``test_`` series present.

    Args:
        history: ``{column: [value per epoch]}``, e.g. a run's
            (:func:`keras_gresnet.training.read_history`).
        path: the ``.png`` to write.
        title: figure title.

    Returns:
        ``path``.
    """
    path, title = check_png_path(path), check_optional_text(title, "title")
    history = _check_history(history)
    fig, (loss_ax, error_ax) = _figure(2, title)
    for prefix, split in SPLITS.items():
        if f"{prefix}loss" in history:
            loss_ax.plot(history["epoch"], history[f"{prefix}loss"], label=split)
        if f"{prefix}accuracy" in history:
            error = _error_percent(history[f"{prefix}accuracy"])
            error_ax.plot(history["epoch"], error, label=split)
    losses = [v for c, vs in history.items() if c.endswith("loss") for v in vs]
    if all(v > 0 for v in losses if not math.isnan(v)):
        loss_ax.set_yscale("log")
    loss_ax.set(xlabel="epoch", ylabel="loss")
    error_ax.set(xlabel="epoch", ylabel="error %")
    for ax in (loss_ax, error_ax):
        ax.legend()
    return _save(fig, path)


def plot_gates_over_epochs(gates, path, title=None):
    """Each gate's ``k`` over the epochs, one line per block coloured by its
    position in the network (the evolution behind GR Figures 5 and 7's final
    ``k``). Epoch -1, if present, is the value before training (GR: 1).

    Args:
        gates: rows ``{"epoch", "index", "block", "k", ...}``, e.g. a run's
            (:func:`keras_gresnet.training.read_gates`).
        path: the ``.png`` to write.
        title: figure title.

    Returns:
        ``path``.
    """
    path, title = check_png_path(path), check_optional_text(title, "title")
    if not isinstance(gates, (list, tuple)) or not gates:
        raise ValueError(f"gates must be a non-empty list of rows, got {gates!r}")
    series = {}  # index -> (block name, [(epoch, k)])
    for row in gates:
        if (
            not isinstance(row, dict)
            or any(c not in row for c in ("epoch", "index", "block", "k"))
            or not isinstance(row["index"], numbers.Integral)
        ):
            raise ValueError(
                f"gates: each row needs epoch, an integer index, block and k, got {row!r}"
            )
        block, points = series.setdefault(row["index"], (row["block"], []))
        if block != row["block"]:
            raise ValueError(
                f"gates: index {row['index']} is both {block!r} and {row['block']!r}"
            )
        points.append((row["epoch"], row["k"]))
    fig, (ax,) = _figure(1, title)
    indices = sorted(series)
    colors, scale = _block_colors(indices)
    for color, index in zip(colors, indices):
        block, points = series[index]
        epochs, ks = zip(*sorted(points))
        ax.plot(epochs, ks, color=color, label=f"{index}: {block}")
    ax.axhline(0, color="black", linewidth=0.8)  # k <= 0: the block is an identity
    ax.set(xlabel="epochs trained (0: initial)", ylabel="k (the block's factor is g(k) = ReLU(k))")
    if len(indices) <= _MAX_LEGEND:
        ax.legend(fontsize="small")
    else:
        fig.colorbar(scale, ax=ax, label="block index (network order)")
    return _save(fig, path)


def plot_k_per_block(blocks, ks, path, title=None, highlight=None, highlight_label="highlighted",
                     ylabel="final k"):
    """Final ``k`` of every block in network order, as bars (GR Figures 5 and
    7).

    Args:
        blocks: block names (or numbers), in network order.
        ks: one ``k`` per block.
        path: the ``.png`` to write.
        title: figure title.
        highlight: positions in ``blocks`` (0-based) to draw in another
            colour, e.g. the blocks with a projection shortcut.
        highlight_label: the legend's name of the highlighted blocks.
        ylabel: what ``ks`` are (e.g. ``"g(k)"``).

    Returns:
        ``path``.
    """
    path, title = check_png_path(path), check_optional_text(title, "title")
    if isinstance(blocks, (str, bytes)) or not hasattr(blocks, "__len__"):
        raise ValueError(f"blocks must be a sequence of block names, got {blocks!r}")
    highlight = [] if highlight is None else list(highlight)
    bad = [
        i for i in highlight
        if not isinstance(i, numbers.Integral) or isinstance(i, bool)
        or not 0 <= i < len(blocks)
    ]
    if bad:
        raise ValueError(
            f"highlight must hold block positions in [0, {len(blocks)}), got {bad}"
        )
    highlight_label = check_optional_text(highlight_label, "highlight_label")
    ylabel = check_optional_text(ylabel, "ylabel")
    if isinstance(ks, dict):
        return _plot_k_per_block_series(blocks, ks, path, title, highlight, highlight_label,
                                        ylabel)
    _, ks = check_series(range(len(blocks)), ks, "ks", "blocks", "ks")
    fig, (ax,) = _figure(1, title, size=(max(6.4, 0.25 * len(ks)), 4.2))
    positions = range(len(ks))
    colors = ["tab:orange" if i in highlight else "tab:blue" for i in positions]
    ax.bar(positions, ks, color=colors)
    if highlight:
        ax.legend(handles=[Patch(color="tab:orange", label=highlight_label),
                           Patch(color="tab:blue", label="other blocks")])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(list(positions), [str(b) for b in blocks], rotation=90, fontsize="small")
    ax.set(xlabel="block", ylabel=ylabel)
    return _save(fig, path)


def _plot_k_per_block_series(blocks, series, path, title, highlight, highlight_label, ylabel):
    """:func:`plot_k_per_block` of several nets (``{label: ks}``, e.g. one
    per seed): a line with markers each, over the same blocks; highlighted
    blocks are shaded."""
    if not series or not all(isinstance(label, str) for label in series):
        raise ValueError(f"ks as a mapping must map labels (str) to k sequences, got "
                         f"{list(series)!r}")
    checked = {label: check_series(range(len(blocks)), ks, f"ks[{label!r}]", "blocks",
                                   f"ks[{label!r}]")[1] for label, ks in series.items()}
    fig, (ax,) = _figure(1, title, size=(max(6.4, 0.25 * len(blocks)), 4.2))
    positions = range(len(blocks))
    for n, i in enumerate(highlight):
        ax.axvspan(i - 0.45, i + 0.45, color="0.85", label=highlight_label if n == 0 else None)
    for label, ks in checked.items():
        ax.plot(positions, ks, marker="o", markersize=3, linewidth=1, label=label)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.legend()
    ax.set_xticks(list(positions), [str(b) for b in blocks], rotation=90, fontsize="small")
    ax.set(xlabel="block", ylabel=ylabel)
    return _save(fig, path)


def plot_mean_k_vs_depth(depths, mean_ks, path, labels=None, reference=None):
    """Mean ``k`` of the gates vs network depth (GR Table 2). The x axis is
    logarithmic when the depths span a factor of 10 or more.

    Args:
        depths: the depths (e.g. GR's middle-layer counts ``d``).
        mean_ks: one mean ``k`` per depth.
        path: the ``.png`` to write.
        labels: optional text per point (e.g. model names), written next to it.
        reference: optional published series drawn dashed: a
            ``(depths, mean_ks)`` pair, or ``{label: (depths, mean_ks)}``.

    Returns:
        ``path``.
    """
    path = check_png_path(path)
    depths, mean_ks = check_series(depths, mean_ks, "mean_ks", "depths", "mean_ks")
    if labels is not None:
        labels = [str(label) for label in labels]
        if len(labels) != len(depths):
            raise ValueError(
                f"labels must have one entry per depth ({len(depths)}), got {len(labels)}"
            )
    if reference is not None and not isinstance(reference, dict):
        reference = {"reference": reference}
    references = {}
    for label, series in (reference or {}).items():
        if not isinstance(series, (list, tuple)) or len(series) != 2:
            raise ValueError(f"reference {label!r} must be a (depths, mean_ks) pair")
        references[label] = check_series(*series, f"reference {label!r}", "depths", "mean_ks")
    fig, (ax,) = _figure(1)
    ax.plot(depths, mean_ks, marker="o", label="measured")
    for label, (x, y) in references.items():
        ax.plot(x, y, linestyle="--", marker="s", label=label)
    for x, y, text in zip(depths, mean_ks, labels or []):
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
    all_depths = depths + [d for x, _ in references.values() for d in x]
    if min(all_depths) > 0 and max(all_depths) >= 10 * min(all_depths):
        ax.set_xscale("log")
        ticks = sorted(set(all_depths))
        ax.set_xticks(ticks, [f"{d:g}" for d in ticks], minor=False)
        ax.set_xticks([], minor=True)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set(xlabel="depth", ylabel="mean k")
    ax.legend()
    return _save(fig, path)


def plot_pruning_curves(curves, path, title=None):
    """Accuracy vs number of blocks removed, no retraining (GR Figure 5:
    GResNet greedy (smallest ``k`` first) and random vs ResNet random).

    Args:
        curves: ``{label: (removed_counts, accuracies)}``.
        path: the ``.png`` to write.
        title: figure title.

    Returns:
        ``path``.
    """
    path, title = check_png_path(path), check_optional_text(title, "title")
    check_mapping(curves, "curves")
    checked = {}
    for label, curve in curves.items():
        if not isinstance(curve, (list, tuple)) or len(curve) != 2:
            raise ValueError(f"curves[{label!r}] must be a (removed_counts, accuracies) pair")
        checked[label] = check_series(
            *curve, f"curves[{label!r}]", "removed_counts", "accuracies"
        )
    fig, (ax,) = _figure(1, title)
    for label, (removed, accuracies) in checked.items():
        ax.plot(removed, accuracies, marker=".", label=str(label))
    ax.set(xlabel="blocks removed", ylabel="accuracy")
    ax.legend()
    return _save(fig, path)


def plot_training_curves_grid(runs, path):
    """Test (else validation) error % vs epoch, one panel per depth, one line
    per model (GR Figure 4: plain vs ResNet vs GResNet at each depth).

    Args:
        runs: ``{depth: {model_label: history}}``, each history as
            :func:`plot_history` takes it, with a ``test_accuracy`` or
            ``val_accuracy`` series.
        path: the ``.png`` to write.

    Returns:
        ``path``.
    """
    path = check_png_path(path)
    check_mapping(runs, "runs")
    panels = {}
    for depth, models in runs.items():
        check_mapping(models, f"runs[{depth!r}]")
        panels[depth] = {}
        for label, history in models.items():
            argument = f"runs[{depth!r}][{label!r}]"
            history = _check_history(history, argument)
            split = next((p for p in ("test_", "val_") if f"{p}accuracy" in history), None)
            if split is None:
                raise ValueError(f"{argument} has no test_accuracy or val_accuracy series")
            panels[depth][label] = (history["epoch"], history[f"{split}accuracy"], split)
    fig, axes = _figure(len(panels), size=(4.8, 4.0))
    labels = list(dict.fromkeys(label for models in panels.values() for label in models))
    for ax, (depth, models) in zip(axes, panels.items()):
        splits = {split for *_, split in models.values()}
        for label, (epochs, accuracies, split) in models.items():
            color = f"C{labels.index(label) % 10}"  # one colour per model in every panel
            name = label if len(splits) == 1 else f"{label} ({SPLITS[split]})"
            ax.plot(epochs, _error_percent(accuracies), color=color, label=name)
        which = SPLITS[splits.pop()] + " " if len(splits) == 1 else ""
        ax.set(title=f"depth {depth}", xlabel="epoch", ylabel=f"{which}error %")
        ax.legend(fontsize="small")
    return _save(fig, path)
