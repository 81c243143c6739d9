"""The command line's modules: each declares one command's options and hands them to the layers below."""
