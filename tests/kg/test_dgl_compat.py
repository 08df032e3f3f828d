"""The DGL import shim: heterograph build, HeteroGraphConv forward/backward, metapath random walk."""

from __future__ import annotations

import os
import sys

import torch

from kg.dgl_compat import GRAPHBOLT_STUB, import_dgl


def test_import_registers_stub_and_backend() -> None:
    dgl = import_dgl()
    assert import_dgl() is dgl
    assert os.environ["DGLBACKEND"] == "pytorch"
    assert dgl.backend.backend_name == "pytorch"
    assert getattr(sys.modules["dgl.graphbolt"], GRAPHBOLT_STUB, False)


def _graph():
    dgl = import_dgl()
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 3])
    return dgl.heterograph({
        ("entity", "in0", "entity"): (src, dst),
        ("entity", "~in0", "entity"): (dst, src),
        ("entity", "gpe0", "entity"): (torch.tensor([3]), torch.tensor([0])),
    }, num_nodes_dict={"entity": 5})


def test_heterograph_build() -> None:
    g = _graph()
    assert g.num_nodes("entity") == 5
    assert g.num_edges("in0") == 3 and g.num_edges("gpe0") == 1
    s, d = g.edges(etype="~in0")
    assert s.tolist() == [1, 2, 3] and d.tolist() == [0, 1, 2]


def test_heterographconv_forward_backward() -> None:
    dgl = import_dgl()
    import dgl.nn as dglnn

    g = _graph()
    torch.manual_seed(0)
    conv = dglnn.HeteroGraphConv({e: dglnn.GraphConv(4, 3, norm="none", bias=False, allow_zero_in_degree=True)
                                  for e in g.etypes}, aggregate="sum")
    x = torch.randn(5, 4, requires_grad=True)
    out = conv(g, {"entity": x})["entity"]
    # reference: sum over edge types of (A_e^T x) W_e (messages flow from source to destination)
    ref = torch.zeros(5, 3)
    for et in g.etypes:
        s, d = g.edges(etype=et)
        ref = ref + torch.zeros(5, 4).index_add(0, d, x[s]) @ conv.mods[et].weight
    assert torch.allclose(out, ref, atol=1e-6)
    params = [x, *conv.parameters()]
    got = torch.autograd.grad(out.pow(2).sum(), params)
    want = torch.autograd.grad(ref.pow(2).sum(), params)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, want))
    assert all(float(gr.abs().sum()) > 0 for gr in got)
    assert dgl.batch([g, g]).num_nodes() == 10


def test_metapath_random_walk_follows_edges() -> None:
    dgl = import_dgl()
    g = _graph()
    torch.manual_seed(0)
    traces, _ = dgl.sampling.random_walk(g, torch.tensor([0, 1, 2, 3, 4]), metapath=["in0", "in0", "gpe0"])
    # 0 -in0-> 1 -in0-> 2 -gpe0-> (none); 1 -> 2 -> 3 -gpe0-> 0; nodes without an edge stop (-1)
    assert traces[0].tolist() == [0, 1, 2, -1]
    assert traces[1].tolist() == [1, 2, 3, 0]
    assert traces[4].tolist() == [4, -1, -1, -1]
