"""An ``ElasticDataLoader`` in the frameworks users train with (imports nothing: each module
imports its own framework).

``accelerate`` (``ElasticAccelerator``, ``prepare_loader``), ``accelerated_loader``
(``AcceleratedLoader``) and ``hf_trainer`` (``ElasticTrainer``, imports ``transformers``).
"""
