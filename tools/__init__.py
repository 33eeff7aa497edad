"""Scripts run from a checkout of the repository (``make docs``); never installed."""
