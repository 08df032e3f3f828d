"""The one place that imports DGL (``dgl==2.1.0``) on this project's torch (2.13).

Why this shim exists: ``import dgl`` 2.1.0 imports ``dgl.graphbolt`` eagerly, whose C++ library is built
only for torch <= 2.2 and which also imports ``torchdata.datapipes`` (gone from current torchdata), so the
plain import fails on torch 2.13. FedNSL needs none of GraphBolt: registering an empty module under
``dgl.graphbolt`` in ``sys.modules`` BEFORE the first ``import dgl`` skips it, and ``DGLBACKEND=pytorch``
pins the tensor backend. With that, heterographs, ``dgl.batch``, ``update_all``/``multi_update_all``,
``dgl.nn.HeteroGraphConv`` (forward and backward) and ``dgl.sampling.random_walk`` with metapaths work
(tests/kg/test_dgl_compat.py checks them). ``dgl.sparse`` and GraphBolt stay unavailable.

Use ``from kg.dgl_compat import import_dgl; dgl = import_dgl()`` instead of ``import dgl``.
"""

from __future__ import annotations

import os
import sys
import types
from functools import lru_cache
from typing import Any

__all__ = ["import_dgl", "GRAPHBOLT_STUB"]

#: Marker attribute set on the empty stand-in module.
GRAPHBOLT_STUB = "__fednsl_graphbolt_stub__"


@lru_cache(maxsize=1)
def import_dgl() -> Any:
    """Import and return the ``dgl`` module with the GraphBolt stub and the PyTorch backend.

    Raises ``RuntimeError`` when ``DGLBACKEND`` is set to a backend other than PyTorch.
    """
    backend = os.environ.setdefault("DGLBACKEND", "pytorch")
    if backend != "pytorch":
        raise RuntimeError(f"DGLBACKEND={backend!r}: fednsl's graphs are torch tensors; set DGLBACKEND=pytorch")
    if "dgl" not in sys.modules:
        stub = types.ModuleType("dgl.graphbolt")
        setattr(stub, GRAPHBOLT_STUB, True)
        sys.modules.setdefault("dgl.graphbolt", stub)
    import dgl  # noqa: PLC0415  (deliberately lazy: only after the stub is registered)

    return dgl
