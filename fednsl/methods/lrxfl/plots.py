"""LR-XFL's figure: the numeric experiments (Fig. 2 a1–a6) — accuracy on unseen-class test sets per
heterogeneity level and training accuracy against the true and the given labels."""

from __future__ import annotations

from fednsl.plots import NUMERIC_KEYS, Panel, PlotSpec, Series, numeric_panels, register_plot

SPEC = register_plot("lrxfl")(
    PlotSpec(
        "lrxfl_accuracy",
        "LR-XFL: logic-rule-weighted aggregation; accuracy on unseen classes and training accuracy",
        numeric_panels(
            "LR-XFL",
            (
                Panel(
                    "Local rules and models",
                    (
                        Series("train/rule_f1_mean", "rule F1 (mean)"),
                        Series("train/model_acc", "model accuracy", "variant"),
                    ),
                    "",
                ),
            ),
        ),
        key_metrics=NUMERIC_KEYS,
    )
)
