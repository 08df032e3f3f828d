"""Engines beyond the core's in-process and decentralised runners.

:mod:`fednsl.engines.flower` runs any registered fednsl method on Flower (``--engine flower-sim`` for
Flower's simulation runtime, ``--engine flower`` for a SuperLink with SuperNodes). Flower is an optional
extra (``pip install 'fednsl[flower]'``): nothing here is imported by the core, and
:func:`fednsl.pipeline.get_engine` imports the Flower engine only when an engine name starts with "flower".
"""
