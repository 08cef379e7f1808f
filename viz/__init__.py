"""Pure figure builders: numpy arrays in, plotly figures or HTML/SVG strings out (no torch, no streamlit).

One view per file: :mod:`viz.head_view`, :mod:`viz.model_view`, :mod:`viz.heatmap`, :mod:`viz.summary`;
the shared numpy transforms are in :mod:`viz.transforms`.
"""
