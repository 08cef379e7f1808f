"""The live class (issue 29), one module each: a session's part in a room and the page it follows
(:mod:`.room`), the sidebar's panel (:mod:`.panel`), questions (:mod:`.asking`) and lessons (:mod:`.steps`). The
teacher's desk is the Class page, ``views/live.py``."""
