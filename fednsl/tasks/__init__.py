"""Tasks: federated data, models and the clients/strategies every method on that data shares.

* :mod:`fednsl.tasks.blobs` — Gaussian-blob classification with label skew and its MLP;
* :mod:`fednsl.tasks.classifier` — minibatch-SGD classifier client (weights + example counts);
* :mod:`fednsl.tasks.numeric` — the FedNSL paper's numerical experiment (App. A.5–A.6);
* :mod:`fednsl.tasks.timeseries` — per-client forecasting data, forecasters, STL properties and the
  federated forecasting building blocks (FedAvg/FedProx/FedRep/Ditto/IFCA clients and strategies).

Methods (:mod:`fednsl.methods`) import tasks; tasks never import methods.
"""
