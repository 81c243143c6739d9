"""DSEBench: a keyword query plus example datasets → ranked datasets."""
