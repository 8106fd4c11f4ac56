"""precision-shell: an interactive debugger shell for numerical-precision problems on Ascend NPUs."""

__version__ = "0.1.0"
