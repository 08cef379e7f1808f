"""Cross-attention of a speech model over the clip's spectrogram: which moment of the audio each
transcribed token reads (Whisper; Radford et al. 2022). numpy in, plotly out; no torch, no streamlit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import numbers
from .text import plotly_labels
from .traces import add_trace


def spectrogram_attention_figure(spectrogram: np.ndarray, weights: np.ndarray, token_labels: Sequence[str], *,
                                 frame_seconds: float, hop_seconds: float | None = None,
                                 peaks: Sequence[int] | None = None, title: str = "",
                                 spectrogram_title: str = "log-mel spectrogram",
                                 attention_title: str = "cross-attention", xaxis_title: str = "time (s)",
                                 peak_label: str = "peak", lang: str = "en") -> go.Figure:
    """Spectrogram on top, cross-attention (one row per token, time on x) below, on one time axis.

    Args:
        spectrogram: float ``(mel_bins, columns)``, ``hop_seconds`` per column (default
            ``frame_seconds / 2``: Whisper's 10 ms mel hop under its 20 ms encoder frames).
        weights: float ``(tokens, frames)`` cross-attention to the speech frames only (no padding column).
        token_labels: ``tokens`` row labels (index axis, so repeated words stay separate rows).
        frame_seconds: seconds per encoder frame (key).
        peaks: optional frame index per row (``models.speech.audio.cross_attention_peaks``); drawn as markers at
            the frame's centre.
        lang: how numbers are written (seconds, weights; ``tr``: ``1,25 s``).

    Returns:
        plotly Figure with two rows sharing the time axis (seconds).

    Raises:
        ValueError: shapes that do not match.
    """
    spec = np.asarray(spectrogram, dtype=np.float64)
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64))
    if w.ndim != 2 or w.shape[0] != len(token_labels):
        raise ValueError(f"Weights of shape {w.shape} do not match {len(token_labels)} token labels.")
    hop = hop_seconds if hop_seconds is not None else frame_seconds / 2
    n_rows = max(len(token_labels), 1)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        row_heights=[0.35, 0.65], subplot_titles=(spectrogram_title, attention_title))
    add_trace(fig, go.Heatmap(z=spec, x=(np.arange(spec.shape[1]) + 0.5) * hop, y=np.arange(spec.shape[0]),
                             colorscale="Magma", showscale=False,
                             hovertemplate=f"%{{x:{numbers.d3(2)}}} s, mel bin %{{y}}<extra></extra>"), row=1, col=1)
    top = max(float(w.max()), 1e-9)
    add_trace(fig, go.Heatmap(z=w, x=(np.arange(w.shape[1]) + 0.5) * frame_seconds, y=np.arange(w.shape[0]),
                             colorscale="Blues", zmin=0, zmax=top,
                             colorbar=dict(thickness=10, len=0.6, y=0.3, tickformat=numbers.tick_format(top)),
                             hovertemplate=f"row %{{y}}, %{{x:{numbers.d3(2)}}} s: "
                                           f"%{{z:{numbers.d3(3)}}}<extra></extra>"),
                  row=2, col=1)
    if peaks is not None and len(peaks):
        p = np.asarray(peaks, dtype=np.int64)
        add_trace(fig, go.Scatter(x=(p + 0.5) * frame_seconds, y=np.arange(len(p)), mode="markers+lines",
                                 marker=dict(symbol="diamond", size=9, color="#d62728",
                                             line=dict(width=1, color="white")),
                                 line=dict(color="rgba(214,39,40,0.4)", width=1, dash="dot"), name=peak_label,
                                 hovertemplate=peak_label + f": %{{x:{numbers.d3(2)}}} s<extra></extra>",
                                 showlegend=False),
                      row=2, col=1)
    fig.update_yaxes(title_text="mel", row=1, col=1, showticklabels=False)
    fig.update_yaxes(tickmode="array", tickvals=list(range(len(token_labels))), ticktext=plotly_labels(token_labels),
                     autorange="reversed", row=2, col=1)
    fig.update_xaxes(title_text=xaxis_title, row=2, col=1)
    fig.update_layout(title=dict(text=title, font=dict(size=13)), height=int(300 + 22 * n_rows),
                      margin=dict(l=10, r=10, t=60 if title else 40, b=10))
    return numbers.style(fig, lang)
