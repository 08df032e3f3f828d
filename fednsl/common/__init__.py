"""Helpers shared by tasks and methods, below both: torch weights as numpy dicts, intra-op thread scoping,
the FedAvg server, and a mean-field Bayesian layer. Seeds are derived with :func:`kg.seeding.derive_seed`
(the lowest layer, so that ``kg`` and ``rules`` can use it too)."""
