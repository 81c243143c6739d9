"""Second-stage rerankers: a spec prefix → the loader that builds one (`registry`), the scorers (`cross`,
`embed`) and the stage that reorders a first stage's top candidates (`stage`)."""
