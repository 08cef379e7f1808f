"""A live page's poll that never stops (issue 29, issue 50): a student's page polls the room every two seconds (and
at once when the teacher's change wakes it, :mod:`.wake`) and the teacher's every two, each through a ``run_every``
fragment (:mod:`views.live_sections.panel`), whose timer lives in the browser. Streamlit's frontend clears every
fragment timer when a full run begins and arms one again only when that run's ``auto_rerun`` message arrives; a run
whose messages were dropped or cut on the way (a busy server, "Ignoring event from non-current ScriptRunner") leaves the
page with no timer, and a following student then stays on the old step for good (the fresh clone's browser tier: a
student never reached the lesson's first step in 300 s).

Two guards, each enough on its own:

* :func:`keep` arms the fragment's timer again from each of its own runs (Streamlit arms it only from a full run);
* a watchdog in the page (a ``st.components.v2`` component with no HTML, drawn by the fragment) notes each of the
  fragment's runs; when none came for :data:`STALL` poll intervals, it sets a trigger value, which reruns the
  fragment (a fragment's widget does not stop a full run under way: Streamlit queues it), and that run arms the
  timer again. While the timer works the watchdog sends nothing.

The same watchdog looks for the marker the last full run drew at the end of the main area (:mod:`.redraw`); missing
for :data:`STALL` intervals, it sends that run's number and the fragment's run draws the whole page again.
"""

from __future__ import annotations

import streamlit as st
import streamlit.components.v2 as components

from . import redraw

STALL = 4  # poll intervals with no run of the fragment before the watchdog wakes it
_KEY = "live_watch"

# One checker per window, a timeout chain of its own (not setInterval, so a test can stop Streamlit's timers alone):
# every run of the fragment calls this function again with a new tick, which moves ``at``.
_JS = """
export default function(component) {
  const { data, setTriggerValue } = component;
  const w = window.__dikkatWatch = window.__dikkatWatch || { wakes: 0 };
  if (w.tick !== data.tick) { w.tick = data.tick; w.at = Date.now(); }
  if (w.drawn !== data.drawn) { w.drawn = data.drawn; w.seen = Date.now(); w.redraws = w.redraws || 0; }
  w.after = data.after_ms;
  w.wake = setTriggerValue;
  const shown = () => w.drawn === null || [...document.querySelectorAll("." + data.marker)].some(
    e => Number(e.dataset.run) >= w.drawn);
  const check = () => {
    if (!w.on) return;
    if (Date.now() - w.at > w.after) { w.at = Date.now(); w.wakes += 1; w.wake("wake", w.wakes); }
    if (shown()) { w.seen = Date.now(); }
    else if (Date.now() - w.seen > w.after) { w.seen = Date.now(); w.redraws += 1; w.wake("redraw", w.drawn); }
    w.timer = setTimeout(check, 500);
  };
  if (!w.on) { w.on = true; w.at = Date.now(); check(); }
  return () => { w.on = false; clearTimeout(w.timer); };
}
"""
_watchdog = components.component("dikkat_live_watch", js=_JS)


def keep(every_s: float) -> None:
    """In a ``run_every=every_s`` fragment's body: arm its timer again when this is the fragment's own run, and draw
    the watchdog (above) with this run's tick. Outside a script run (a plain call in a test) it does nothing."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState, get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None:
        return
    fragment_id = ThreadState.get().fragment_id
    if fragment_id and ctx.fragment_ids_this_run:  # a full run: Streamlit's own decorator armed it
        msg = ForwardMsg()
        msg.auto_rerun.interval = every_s
        msg.auto_rerun.fragment_id = fragment_id
        ctx.enqueue(msg)
    tick = st.session_state["_live_tick"] = int(st.session_state.get("_live_tick", 0)) + 1
    data = {"tick": tick, "after_ms": int(STALL * every_s * 1000), "drawn": redraw.last_drawn(),
            "marker": redraw.MARKER}
    found = _watchdog(key=_KEY, data=data, on_wake_change=_woken, on_redraw_change=_woken)
    missing = getattr(found, "redraw", None)  # a trigger's value lasts for the run it caused
    if missing is not None:
        redraw.asked(int(missing))


def _woken() -> None:
    """The watchdog's triggers: nothing to do here; the fragment's run they cause is the point (:func:`keep` reads
    the page's missing run)."""
