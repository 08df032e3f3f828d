"""Federated methods: each subpackage registers one strategy + client pair by name.

See :func:`fednsl.registry.load_methods`.
"""
