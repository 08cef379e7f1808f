"""Pure figure builders: numpy arrays / dataclasses in, plotly figures (or HTML) out. No torch, no streamlit."""
