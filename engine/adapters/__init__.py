"""Task adapters: read a shared task's files, build the inputs of a core mechanism, write its submission."""
