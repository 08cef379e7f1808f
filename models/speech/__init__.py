"""Speech models (Whisper): a recording in, the encoder's, decoder's and cross-attention's weights out.

* :mod:`.audio`: :func:`analyze_audio` and :class:`AudioAnalysis` (the encoder cropped to the speech).
* :mod:`.wav`: reading, writing and resampling WAV files (no audio library needed).
* :mod:`.whisper_tokens`: Whisper's prompt tokens, byte-level pieces and alignment heads.
* :mod:`.convert_whisper`: the bundled CTranslate2 package converted to a transformers folder.
"""

from .audio import AudioAnalysis, analyze_audio, analyze_wav

__all__ = ["AudioAnalysis", "analyze_audio", "analyze_wav"]
