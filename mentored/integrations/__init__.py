r"""mentored inside other systems: Hugging Face decoding loops (:mod:`.hf`), vLLM's rejection sampler
(:mod:`.vllm_plugin`), the training of the shipped model pair (:mod:`.train`) and its corpus and
tokenizer (:mod:`.corpus`)."""

__all__: list[str] = []
