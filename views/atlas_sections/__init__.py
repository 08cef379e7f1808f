"""The Head atlas page's parts, one module each (the page itself is ``views/atlas.py``)."""
