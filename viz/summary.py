"""Head summary table: one row per head with the statistics of :func:`viz.transforms.head_statistics`
(Clark et al. 2019, "What Does BERT Look At?"), so a teacher can sort and find the heads worth showing:
the ones that look at the previous token, at [SEP], at punctuation, or spread their weight widely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .transforms import STATISTICS


def head_summary_table(stats: Mapping[str, np.ndarray], *, column_names: Mapping[str, str] | None = None,
                       layer_column: str = "layer", head_column: str = "head",
                       head_names: Sequence[str] | None = None) -> pd.DataFrame:
    """Statistics per head as a pandas DataFrame.

    Args:
        stats: name -> float ``(layers, heads)`` (from :func:`viz.transforms.head_statistics`).
        column_names: display name per statistic (default: the statistic's name).
        layer_column, head_column: names of the first two columns.
        head_names: display name per head column index (default: its number).

    Returns:
        DataFrame with ``layers * heads`` rows ordered by layer then head: ``layer`` (int), ``head``
        (int or name), then one float column per statistic in :data:`viz.transforms.STATISTICS` order
        (entropy in nats, distance in tokens, the others shares of weight in [0, 1]; NaN where undefined).

    Raises:
        ValueError: statistics of different shapes.
    """
    names = [k for k in STATISTICS if k in stats]
    shapes = {np.asarray(stats[k]).shape for k in names}
    if len(shapes) != 1:
        raise ValueError(f"statistics have different shapes: {shapes}")
    layers, heads = shapes.pop()
    layer_idx, head_idx = np.meshgrid(np.arange(layers), np.arange(heads), indexing="ij")
    data = {layer_column: layer_idx.ravel(),
            head_column: (np.asarray(list(head_names), dtype=object)[head_idx.ravel()] if head_names is not None
                          else head_idx.ravel())}
    column_names = column_names or {}
    for k in names:
        data[column_names.get(k, k)] = np.asarray(stats[k], dtype=np.float64).ravel()
    return pd.DataFrame(data)
