"""Env factories for ``env_path: python:MODULE:FUNCTION``, ready to point a config at (``configs/``)."""
