"""Signal Temporal Logic for fednsl: syntax, differentiable robustness, templates, mining,
clustering by property alignment (FedSTL, AAAI'24; LogiCP, JAIR 2026).

Quick start:

```python
import torch
from rules import stl

f = stl.parse("always[0:5](x >= a)")
x = torch.randn(32, 24)                      # (batch, T)
rho = stl.robustness(f, {"x": x}, {"a": -1.0})   # (32, 19): start times 0 .. T-1-horizon
g = stl.violation(f, {"x": x}, {"a": -1.0})      # LogiCP Eq. 9, = relu(-rho)

tpl = stl.operational_range(count=12, width=2)   # FedSTL Table 1 row 1, 24 steps
y = torch.randn(100, 16, 24)                 # (clients, samples, T)
params = stl.mine(tpl, y)                    # {"a0": (100,), "b0": (100,), ...}
formulas = stl.instantiate_clients(tpl, params)
```

See the README section "Signal Temporal Logic" for the semantics, conventions and benchmarks.
"""

from .clustering import (
    ClusterResult,
    alignment_matrix,
    alignment_matrix_from_formulas,
    assign_argmin,
    assign_balanced,
    cluster_id,
    cluster_members,
)
from .generate import random_formula
from .mining import mine, mine_closed_form, mine_search
from .parser import STLSyntaxError, parse
from .robustness import holds, r_stl, robustness, tightness, violation
from .syntax import (
    Always,
    And,
    Eventually,
    Formula,
    Implies,
    Not,
    Or,
    Predicate,
    Release,
    Until,
    conj,
    disj,
    to_text,
)
from .templates import (
    TEMPLATES,
    Template,
    existence,
    get_template,
    instantiate,
    instantiate_clients,
    intra_task,
    multiple_eventualities,
    nested_intra_task,
    operational_range,
    range_band,
    temporal_implication,
    until_template,
)

__all__ = [
    "Always",
    "And",
    "Eventually",
    "Formula",
    "Implies",
    "Not",
    "Or",
    "Predicate",
    "Release",
    "ClusterResult",
    "STLSyntaxError",
    "TEMPLATES",
    "Template",
    "Until",
    "alignment_matrix",
    "alignment_matrix_from_formulas",
    "assign_argmin",
    "assign_balanced",
    "cluster_id",
    "cluster_members",
    "conj",
    "disj",
    "existence",
    "get_template",
    "holds",
    "instantiate",
    "instantiate_clients",
    "intra_task",
    "mine",
    "mine_closed_form",
    "mine_search",
    "multiple_eventualities",
    "nested_intra_task",
    "operational_range",
    "parse",
    "r_stl",
    "random_formula",
    "range_band",
    "robustness",
    "temporal_implication",
    "tightness",
    "to_text",
    "until_template",
    "violation",
]
