"""The cost of long context: the n × n matrix, measured time and memory against n, and what
FlashAttention, sparse and sliding-window attention change."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import streamlit as st

import models
from models.jobs import Job
from models.lessons import cost
from views import shared
from views.shared import jobs as heavy
from viz import cost as vc
from viz import numbers as nb

t = shared.t
L = shared.lang()

sel, loaded = shared.page_start("cost_title", "cost_intro")

# ---- 1. the n x n matrix ----------------------------------------------------------------------------
st.header(t("cost_s1"))
stack = loaded.input_stack
n_layers, n_heads = loaded.stacks[stack]
value_bytes = loaded.dtype.itemsize  # bytes per weight (a torch.dtype knows its size)
st.markdown(t("cost_s1_text", model=sel.model, layers=n_layers, heads=n_heads, bytes=value_bytes))
rows = []
for n in (1_000, 100_000, 1_000_000):
    entries, one = cost.attention_matrix_size(n, bytes_per_value=4)
    _, whole = cost.attention_matrix_size(n, bytes_per_value=value_bytes, layers=n_layers, heads=n_heads)
    rows.append({t("cost_col_n"): nb.integer(n, L), t("cost_col_entries"): vc.power_of_ten(entries, lang=L),
                 t("cost_col_one"): nb.human_bytes(one, L),
                 shared.t_plain("cost_col_model", model=sel.model): nb.human_bytes(whole, L)})
shared.table(pd.DataFrame(rows), hide_index=True)  # headers and cells escaped: st.table renders Markdown

# ---- 2. measured -----------------------------------------------------------------------------------------------
st.header(t("cost_s2"))
st.markdown(t("cost_s2_text"))
options = cost.default_lengths(loaded, top=1024)
cap_limit = models.analysis.weight_budget_tokens(loaded)
c1, c2 = st.columns([3, 1])
# the page's widgets live in the URL (issue 13)
URL = shared.UrlState("cost")
URL.bind("cost_lengths", [n for n in options if n <= 128], options=options)
URL.bind("cost_repeats")
lengths = c1.multiselect(t("cost_lengths"), options, key="cost_lengths")
repeats = c2.number_input(t("cost_repeats"), *URL.bounds("cost_repeats"), key="cost_repeats")
st.caption(t("cost_limits", limit=loaded.max_positions, cap=cap_limit))

state_key = f"cost_job::{sel.model}"  # the params of the measurement this session asked for


def _measure(model, lengths: tuple, repeats: int) -> Callable[[Job], dict]:
    """The job that measures (on the heavy-work pool: one run per model, lengths and repeats for every session)."""

    def run(job) -> dict:
        points: list[cost.CostPoint] = []
        record: dict = {"points": points, "done": False, "planned": None, "repeats": repeats}

        def on_point(point: cost.CostPoint, done: int, total: int) -> None:
            points.append(point)
            record["planned"] = total
            job.progress(done / total, done=done, total=total, n=point.n, impl=point.implementation,
                         seconds=point.seconds)

        cost.default_twin(model)
        cost.measure_cost(model, list(lengths), repeats=repeats, on_point=on_point, should_stop=job.stopped)
        record["done"] = not job.stopped()
        return record

    return run


def _progress_text(job) -> str:
    """The progress bar's text: the point measured last, or 'preparing' before the first."""
    d = job.detail
    if not d.get("total"):
        return t("cost_preparing")
    return t("cost_progress", done=d["done"], total=d["total"], n=d["n"], impl=t(f"cost_impl_{d['impl']}"),
             seconds=nb.num(d["seconds"], 2, L))


params = (sel.model, str(loaded.device), tuple(sorted(int(n) for n in lengths)), int(repeats))
# thirty presses of the same measurement are one run on the pool, its result served to all (issue 44)
if (st.button(t("cost_run"), key="cost_run", type="primary", disabled=not lengths)
        and heavy.start("cost", params, _measure(loaded, params[2], params[3])) is not None):
    st.session_state[state_key] = params
asked = st.session_state.get(state_key)
job = heavy.find("cost", asked) if asked is not None else None
record = None
if job is not None and not job.finished:
    heavy.follow("cost", asked, "cost_stop_btn", _progress_text)
elif job is not None and job.state == "failed":
    if isinstance(job.error, models.DikkatError):
        shared.show_error(job.error)
    else:
        st.error(shared.message(f"{type(job.error).__name__}: {job.error}"))
elif job is not None:
    record = job.result
if record and record["points"]:
    points: list[cost.CostPoint] = record["points"]
    if not record["done"]:
        st.warning(t("cost_stopped", done=len(points), total=record["planned"] or len(points)))
    URL.bind("cost_log")
    log = st.toggle(t("cost_log"), key="cost_log")
    impls = [i for i in cost.IMPLEMENTATIONS if any(p.implementation == i for p in points)]
    series_t, series_m = {}, {}
    for impl in impls:
        ps = sorted((p for p in points if p.implementation == impl), key=lambda p: p.n)
        series_t[t(f"cost_impl_{impl}")] = ([p.n for p in ps], [p.seconds for p in ps])
        series_m[t(f"cost_impl_{impl}")] = ([p.n for p in ps], [p.peak_bytes / 2**20 for p in ps])
    anchor = max(points, key=lambda p: (p.implementation == "captured", p.n))
    ns = sorted({p.n for p in points})
    ref_ns = np.geomspace(min(ns), max(ns), 40) if len(ns) > 1 else np.array(ns, dtype=float)
    f1, f2 = st.columns(2)
    fig_time = vc.cost_curves(series_t, reference=(ref_ns, cost.quadratic_reference(ref_ns, anchor.n, anchor.seconds)),
                              reference_name=t("cost_ref"), x_title=t("cost_x"), y_title=t("cost_seconds"),
                              title=t("cost_time_fig"), log=log, lang=L)
    fig_memory = vc.cost_curves(series_m, reference=(ref_ns, cost.quadratic_reference(ref_ns, anchor.n,
                                                                                          anchor.peak_bytes / 2**20)),
                                reference_name=t("cost_ref"), x_title=t("cost_x"), y_title="MiB",
                                title=t("cost_memory_fig"), log=log, lang=L)
    shared.plotly_chart(fig_time, container=f1, key="cost_time")
    shared.plotly_chart(fig_memory, container=f2, key="cost_memory")
    table = pd.DataFrame([{t("cost_col_n"): p.n, t("cost_col_impl"): t(f"cost_impl_{p.implementation}"),
                           t("cost_seconds"): round(p.seconds, 4), "MiB": round(p.peak_bytes / 2**20, 2),
                           t("cost_col_kept"): nb.human_bytes(p.recorded_bytes, L)} for p in points])
    shared.dataframe(table, decimals={t("cost_seconds"): 4, "MiB": 2}, hide_index=True)
    st.download_button(t("teach_download_csv"), table.to_csv(index=False).encode("utf-8"), file_name="cost.csv",
                       mime="text/csv", key="cost_csv")
    method = points[0].memory_method
    st.caption(t("cost_measured", device=str(loaded.device), threads=points[0].threads, repeats=record["repeats"],
                 memory=t(f"cost_memory_{method}") if method != "none" else "—"))

# ---- 3. what changes it ---------------------------------------------------------------------------------------
st.header(t("cost_s3"))
st.markdown(t("cost_flash"))
st.markdown(t("cost_sparse"))
st.markdown(t("cost_window"))
window = getattr(loaded.config, "sliding_window", None)
if window:
    st.info(t("cost_model_window", model=sel.model, w=window))
st.markdown(t("cost_see_kv"))
URL.finish()
