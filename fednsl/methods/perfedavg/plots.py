"""Per-FedAvg's figure: the numeric experiments (Fig. 2 a1–a6) — accuracy on unseen-class test sets per
heterogeneity level and training accuracy against the true and the given labels."""

from __future__ import annotations

from fednsl.plots import NUMERIC_KEYS, PlotSpec, numeric_panels, register_plot

SPEC = register_plot("perfedavg")(
    PlotSpec(
        "perfedavg_accuracy",
        "Per-FedAvg (personalised baseline): accuracy on unseen classes and training accuracy",
        numeric_panels(
            "Per-FedAvg",
            (),
        ),
        key_metrics=NUMERIC_KEYS,
    )
)
