"""Command-line tools (installed as gles_delegate.tools; console scripts in setup.cfg)."""
