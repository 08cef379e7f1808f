"""What every page shares (a package beside the pages, one module per concern): UI strings in both languages and
escaping (:mod:`.strings`), tables and errors on a page (:mod:`.output`), figures on a page (:mod:`.charts`), the
cached models and analyses (:mod:`.cache`) and the figures built once for every session (:mod:`.figures`), the page's
state in the link (:mod:`.urlstate`), the layer and head picker (:mod:`.pickers`), the text field that keeps a
classroom's limit (:mod:`.fields`), a model page's top (:mod:`.page`), the sidebar (:mod:`.sidebar`), the text size
of projector mode (:mod:`.scale`). Pages use them as ``shared.t``, ``shared.get_analysis``, ....

A loaded model is cached per process by :func:`models.load` and shared by every browser session; per-request settings
(heads off, masks) travel with each call into ``models.analyze``. Analyses, prepared views and other results of every
page share one cache bounded by bytes (:data:`CACHE`, ``DIKKAT_CACHE_GIB``, default 4 GiB), so an analysis is stored
once for all pages.
"""
from .cache import (  # noqa: F401
    CACHE, analysis_ui, cached, get_analysis, get_flow, get_model, kept, kept_since, load_model_ui,
    reads_text, run_and_keep, truncation_text,
)
from .fields import text_field  # noqa: F401
from .heads import HEADS_OFF_KEY, heads_off, set_heads_off  # noqa: F401
from . import heads  # noqa: F401  (the heads switched off: shared.heads.heads_from_link, ...)
from .figures import shared_figure  # noqa: F401
from .output import (  # noqa: F401
    PLOTLY_SEPARATORS, dataframe, error_text, message, model_name, show_error, table,
)
from .charts import plotly_chart  # noqa: F401  (a figure styled for the viewer, sent as kept for every session)
from .page import page_start  # noqa: F401
from .pagerun import run_page, stop  # noqa: F401  (a page run that keeps nothing of its own once it ends; its early end)
from .preload import plotly_preload  # noqa: F401  (plotly's module loaded while a page without a chart is read)
from .pickers import MEAN, grid_cell, layer_head, mask_and_heads_off, self_stack  # noqa: F401
from .scale import SCALES, app_css, factor, fewer, scale_figure, style as scale_style  # noqa: F401
from .sidebar import (  # noqa: F401
    DEFAULT_TEXT, DEFAULT_TEXTS, Selection, _catalog_label, default_text, example_texts, selection, sidebar, spec_text,
)
from .strings import (  # noqa: F401
    ASSETS, Md, _strings, lang, md, t, t_plain,
)
from .urlstate import (  # noqa: F401
    clamp, open_with, UrlState, url_drop,
)
