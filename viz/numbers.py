"""Numbers written the way each interface language writes them.

English: ``131,072`` and ``1.75``; Turkish: ``131.072`` and ``1,75`` (comma for decimals, dot for
thousands). A Turkish reader would read "1.749" as one thousand seven hundred and forty-nine, so every
number shown in running text or in a metric goes through :func:`num`.
"""

from __future__ import annotations


def localise(text: str, lang: str) -> str:
    """Swap an English-formatted number's separators into ``lang``'s style (``"1,234.5" -> "1.234,5"`` in tr)."""
    if lang != "tr":
        return text
    return text.replace(",", "\0").replace(".", ",").replace("\0", ".")


def num(value: float, decimals: int = 3, lang: str = "en", *, sign: bool = False) -> str:
    """``value`` with ``decimals`` decimals and thousands separators in ``lang`` (``en`` or ``tr``);
    ``sign=True`` writes a leading + for positive values. A value that rounds to zero is written as zero,
    never ``-0.000`` (a student reads a minus sign as a change)."""
    spec = f"{'+' if sign else ''},.{decimals}f"
    value = float(value)
    if value == value and abs(value) != float("inf"):  # finite: -0.0000001 -> 0.0, and -0.0 -> 0.0
        value = round(value, decimals) + 0.0
    return localise(format(value, spec), lang)


def integer(value: int, lang: str = "en") -> str:
    """``131072 -> "131,072"`` (en) / ``"131.072"`` (tr)."""
    return localise(f"{int(value):,}", lang)


def sci(value: float, decimals: int = 1, lang: str = "en") -> str:
    """Scientific notation, ``8.9e-08`` (en) / ``8,9e-08`` (tr)."""
    return localise(f"{float(value):.{decimals}e}", lang)


def human_bytes(n: float, lang: str = "en") -> str:
    """``1536 -> "1.5 KiB"``: binary units up to PiB, decimals in ``lang``'s style."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{integer(n, lang)} B" if unit == "B" else f"{num(n, 1, lang)} {unit}"
        n /= 1024
    return f"{num(n, 1, lang)} PiB"
