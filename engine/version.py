"""The engine's version: its own module so that the store can stamp manifests without importing the package."""
__version__ = "0.2.0"
