"""Loading and the functional forward."""
