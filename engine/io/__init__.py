"""Reading and writing the files users hand us (tables, query files) and the ones we hand back."""
