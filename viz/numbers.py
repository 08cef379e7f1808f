"""Numbers written the way each interface language writes them: the one formatter of the app (issue 33).

============  ==============  ==============
kind          English (en)    Turkish (tr)
============  ==============  ==============
decimal       ``1.75``        ``1,75``
thousands     ``131,072``     ``131.072``
percent       ``30 %``        ``%30``
 decimals     ``1.2 %``       ``%1,2``
 tiny share   ``<1 %``        ``<%1``
 negative     ``-5 %``        ``-%5``
signed        ``+0.250``      ``+0,250``
scientific    ``8.9e-08``     ``8,9e-08``
not a number  ``—``           ``—``
============  ==============  ==============

A Turkish reader would read "1.749" as one thousand seven hundred and forty-nine, so every number shown in
running text, a metric, a table or a figure goes through this module: :func:`num`, :func:`integer`,
:func:`percent`, :func:`signed`, :func:`sci`, :func:`general` for text, and for plotly figures
:func:`style` (the language's ``layout.separators``, no SI suffixes such as "1µ" on any axis or colour bar),
:func:`d3` / :func:`tick_format` (d3 format strings for ticks, hover and cell text) and :func:`percent_axis` /
:func:`percent_hover` (the percent sign on the language's side). A share that is not zero is never written
as 0 % (nor one below the whole as 100 %). English keeps one style, the sign after a space (``30 %``, as every
English text of ``assets/i18n`` writes it); Turkish writes the sign before the number with no space (``%30``).
"""

from __future__ import annotations

import math

LANGS = ("en", "tr")
SEPARATORS = {"en": ".,", "tr": ",."}  # plotly's layout.separators: the decimal mark, then the thousands separator
NOT_A_NUMBER = "—"
EN_PERCENT = " %"  # English: "30 %", the one English style of the app's texts
# plotly's default tick labels (exponentformat "B") write 0.000001 as "1µ" and 0.001 s as "1m" (read as minutes);
# "power" writes 1×10⁻⁶ in both languages
EXPONENT_FORMAT = "power"


def localise(text: str, lang: str) -> str:
    """Swap an English-formatted number's separators into ``lang``'s style (``"1,234.5" -> "1.234,5"`` in tr)."""
    if lang != "tr":
        return text
    return text.replace(",", "\0").replace(".", ",").replace("\0", ".")


def _not_finite(value: float) -> str:
    """NaN as "—", infinities as ``∞`` / ``-∞``."""
    if value != value:
        return NOT_A_NUMBER
    return "∞" if value > 0 else "-∞"


def num(value: float, decimals: int = 3, lang: str = "en", *, sign: bool = False) -> str:
    """``value`` with ``decimals`` decimals and thousands separators in ``lang`` (``en`` or ``tr``);
    ``sign=True`` writes a leading + for positive values. A value that rounds to zero is written as zero,
    never ``-0.000`` (a student reads a minus sign as a change). NaN is ``nan``, infinities ``∞`` / ``-∞``."""
    spec = f"{'+' if sign else ''},.{decimals}f"
    value = float(value)
    if value != value:
        return "nan"
    if not math.isfinite(value):
        return ("+" if sign and value > 0 else "") + _not_finite(value)
    value = round(value, decimals) + 0.0  # -0.0000001 -> 0.0, and -0.0 -> 0.0
    return localise(format(value, spec), lang)


def signed(value: float, decimals: int = 3, lang: str = "en") -> str:
    """A change: ``+0.250`` / ``-1.500`` (tr ``+0,250``); a change that rounds to zero is ``+0.000``."""
    return num(value, decimals, lang, sign=True)


def integer(value: float, lang: str = "en") -> str:
    """``131072 -> "131,072"`` (en) / ``"131.072"`` (tr); NaN "—"."""
    value = float(value)
    if not math.isfinite(value):
        return _not_finite(value)
    return localise(f"{int(round(value)):,}", lang)


def sci(value: float, decimals: int = 1, lang: str = "en") -> str:
    """Scientific notation, ``8.9e-08`` (en) / ``8,9e-08`` (tr)."""
    value = float(value)
    if not math.isfinite(value):
        return _not_finite(value)
    return localise(f"{value:.{decimals}e}", lang)


def general(value: float, digits: int = 6, lang: str = "en") -> str:
    """Up to ``digits`` significant digits, scientific for tiny and huge values (``0.000123``, ``1.5e-07``,
    ``1,234.5``); NaN "—"."""
    value = float(value)
    if not math.isfinite(value):
        return _not_finite(value)
    return localise(format(value + 0.0, f",.{digits}g"), lang)


def number(value: float, decimals: int = 3, lang: str = "en") -> str:
    """:func:`num`, but a value that is not zero and would be written as zero in ``decimals`` decimals is
    written in scientific notation (``0.0000004 -> "4.0e-07"``, not ``"0.000"``); NaN "—"."""
    value = float(value)
    if not math.isfinite(value):
        return _not_finite(value)
    if value != 0 and round(value, decimals) == 0:
        return sci(value, 1, lang)
    return num(value, decimals, lang)


def _with_percent_sign(body: str, lang: str) -> str:
    """``"30"`` -> ``30 %`` (en) / ``%30`` (tr); a leading sign stays in front (``-%5``)."""
    sign = body[0] if body[:1] in "+-" else ""
    digits = body[len(sign):]
    return f"{sign}%{digits}" if lang == "tr" else f"{sign}{digits}{EN_PERCENT}"


def percent(share: float, decimals: int = 0, lang: str = "en", *, sign: bool = False) -> str:
    """A share (``0.3`` = 30 %) as a percentage: ``30 %`` (en) / ``%30`` (tr), ``1.2 %`` / ``%1,2``.

    A share that is not zero but rounds to zero is written ``<1 %`` / ``<%1`` (``<0.1 %`` with one decimal), a
    share just under the whole that rounds to 100 ``>99 %`` / ``>%99``: "1 of 270 heads off (0 %)" read as
    none. ``sign=True`` writes a + in front of a positive change. NaN "—".
    """
    share = float(share)
    if not math.isfinite(share):
        return _not_finite(share)
    p = 100.0 * share
    shown = round(p, decimals) + 0.0
    step = 10.0 ** -decimals
    if p != 0 and shown == 0:
        return ("<" + _with_percent_sign(num(step, decimals, lang), lang) if p > 0
                else ">" + _with_percent_sign(num(-step, decimals, lang), lang))
    if 0 < p < 100 and shown >= 100:
        return ">" + _with_percent_sign(num(100 - step, decimals, lang), lang)
    return _with_percent_sign(num(shown, decimals, lang, sign=sign), lang)


def human_bytes(n: float, lang: str = "en") -> str:
    """``1536 -> "1.5 KiB"``: binary units up to PiB, decimals in ``lang``'s style."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{integer(n, lang)} B" if unit == "B" else f"{num(n, 1, lang)} {unit}"
        n /= 1024
    return f"{num(n, 1, lang)} PiB"


# ------------------------------------------------------------------------------------------ plotly


def separators(lang: str) -> str:
    """plotly's ``layout.separators`` for ``lang``: ``".,"`` (en), ``",."`` (tr)."""
    return SEPARATORS.get(lang, SEPARATORS["en"])


def d3(decimals: int = 3, *, sign: bool = False, thousands: bool = True) -> str:
    """A d3 format for fixed decimals (``",.3f"``, ``"+,.2f"``); plotly writes it with the figure's
    ``separators``, so one string serves both languages."""
    return f"{'+' if sign else ''}{',' if thousands else ''}.{decimals}f"


def tick_format(peak: float, ticks: int = 5) -> str:
    """A d3 format for ticks (axis, colour bar) over values up to ``|peak|``: fixed decimals that tell
    ``ticks`` ticks apart (trailing zeros trimmed: ``0.05``, ``0.1``), scientific below 0.001 (``1.0e-6``),
    never an SI suffix ("1µ")."""
    peak = abs(float(peak))
    if not math.isfinite(peak) or peak == 0:
        return ",.1~f"
    if peak < 1e-3:
        return ".1~e"
    decimals = max(0, min(6, -math.floor(math.log10(peak / ticks))))
    return f",.{decimals}~f"


def percent_axis(lang: str) -> dict:
    """An axis in percent (its values 0..100): the sign after the number in English (``30 %``), before it in
    Turkish (``%30``). Pass to ``update_xaxes`` / ``xaxis=``."""
    return {"tickprefix": "%", "ticksuffix": ""} if lang == "tr" else {"tickprefix": "", "ticksuffix": EN_PERCENT}


def percent_hover(variable: str, decimals: int, lang: str) -> str:
    """A hover / text template for a value already in percent: ``%{y:.1f} %`` (en), ``%%{y:.1f}`` (tr; the
    first ``%`` is the sign, plotly's variables start at ``%{``)."""
    value = f"%{{{variable}:{d3(decimals)}}}"
    return "%" + value if lang == "tr" else value + EN_PERCENT


def _axes(fig) -> list:
    layout = fig.layout
    return [layout[name] for name in layout if name.startswith(("xaxis", "yaxis")) and layout[name] is not None]


def _colorbars(fig) -> list:
    bars = []
    for trace in fig.data:
        if "colorbar" in trace and trace.showscale is not False:  # a heatmap's own scale
            bars.append(trace.colorbar)
        # a marker's colour bar only where the figure shows one: setting it would draw a bar on a line chart
        if "marker" in trace and "colorbar" in trace.marker and trace.marker.showscale:
            bars.append(trace.marker.colorbar)
    if fig.layout.coloraxis.to_plotly_json():  # a shared colour axis, when a figure has one
        bars.append(fig.layout.coloraxis.colorbar)
    return bars


def style(fig, lang: str = "en"):
    """``fig`` with its numbers written ``lang``'s way: ``layout.separators`` (ticks, hover, cell text:
    Turkish ``0,25`` and ``131.072``) and every axis and colour bar without SI suffixes (plotly's default
    writes 0.000001 as "1µ": here ``1×10⁻⁶``, or the tick format a builder chose). Returns ``fig``."""
    fig.update_layout(separators=separators(lang))
    for part in _axes(fig) + _colorbars(fig):
        if part.exponentformat in (None, "B", "SI", "SI extended"):
            part.exponentformat = EXPONENT_FORMAT
    return fig
