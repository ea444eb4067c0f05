"""ailab: the shared package behind the course's notebooks. See README.md for the map."""
import os as _os

# Offline by construction: nothing in ailab may reach a model hub.
_os.environ.setdefault("HF_HUB_OFFLINE", "1")
_os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
