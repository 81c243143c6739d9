"""Building collections, above the index: `options` (BuildOptions), `chunks` (resumable chunked encoding in
`.partial/`), `ray_encode` (the same chunks on a Ray actor pool), `commit` (a generation's core files and
manifest), `from_source` (images, texts or items through an encoder). Never imports the collection facade."""
