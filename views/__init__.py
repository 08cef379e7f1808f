"""Streamlit pages (glue only: read widgets, call models/, draw viz/)."""
