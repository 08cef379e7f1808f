"""The lessons' computations on the loaded model, one module per lesson page.

Everything here works on the model's own weights and own forward pass, so a classroom sees the real
vectors of whichever model it loaded (not a fixed toy):

* :mod:`.layer_input`: the input of one attention layer, captured in the model's forward pass.
* :mod:`.qkv`: Q/K/V step by step (``views/qkv.py``).
* :mod:`.positions`: sinusoidal encodings, RoPE, ALiBi, word order (``views/positions.py``).
* :mod:`.cost`: time and memory against sequence length (``views/cost.py``).
* :mod:`.kvcache`: the key/value cache (``views/kvcache.py``).

No Streamlit, no plotly: a notebook uses these directly.
"""
