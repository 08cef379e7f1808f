"""The Explore page's parts (issue 49): views/explore.py is the page script Streamlit runs; it reads the page's state
once into one :class:`~views.explore_parts.state.ExploreState` and passes it to the views here.

* :mod:`.state`: the state object, the views' sizes, the cached preparation of the weights and the head view's
  window slider;
* :mod:`.figures`: the head view, the model view and the head heatmap;
* :mod:`.tables`: the head summary table and the exports of the numbers.

Explore's Session State keys and link parameters keep their short names (``layer``, ``head``, ``view``, ...) here as
on the page."""
