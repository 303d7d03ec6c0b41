"""Adapters for agent frameworks, each an optional extra: ``convmem[langchain]``
(``integrations.langchain``), ``convmem[llamaindex]`` (``integrations.llamaindex``)."""
