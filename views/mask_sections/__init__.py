"""The Masks page's sections, one module each (the page itself is ``views/masks.py``)."""
