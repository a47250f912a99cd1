r"""The demo: the command line (:mod:`.cli`, ``mentored`` and ``python -m mentored``) and the text
models it decodes with (:mod:`.textlm`). Nothing in the library imports this layer."""

__all__: list[str] = []
