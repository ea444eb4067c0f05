"""ailab: the shared package behind the course's notebooks. See README.md for the map."""

import os as _os

# Offline by construction: nothing in ailab may reach a model hub.
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A static page (the book executes notebooks with AILAB_STATIC=1) cannot draw plotly's JSON output: emit
# a <div> and a Plotly.newPlot script instead (no CDN), for the plotly.js the book serves from _static.
if _os.environ.get("AILAB_STATIC") == "1":
    from ailab.viz import use_static_renderer

    use_static_renderer()

__version__ = "0.1.0"
