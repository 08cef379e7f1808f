"""Pure figure builders: numpy arrays / dataclasses in, plotly figures (or HTML) out. No torch, no streamlit.

One view per file (e.g. :mod:`viz.head_view`, :mod:`viz.model_view`, :mod:`viz.heatmap`,
:mod:`viz.summary`); the shared numpy transforms are in :mod:`viz.transforms`.
"""
