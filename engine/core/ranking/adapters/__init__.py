"""Stages fitted on labelled pairs: a small adapter over a frozen encoder (`fit`, `pairs`), used as the
encoder spec `adapted:DIR` (`engine.core.encoders.adapted`)."""
