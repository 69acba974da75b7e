"""The TPM on the node: learnt online (``online_model``), fitted in a child process
(``refit``, ``python -m adloader.daemon.model.refit``), and the features of a model not in
the shipped table counted in a child (``model_features``)."""
