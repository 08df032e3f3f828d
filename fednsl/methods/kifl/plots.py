"""KIFL's figure: accuracy of the knowledge-injected federated model and the share of test predictions that
violate the injected rules (PoV; lower is better)."""

from __future__ import annotations

from fednsl.plots import Panel, PlotSpec, Series, register_plot

KIFL = register_plot("kifl")(
    PlotSpec(
        "kifl_accuracy",
        "KIFL: test accuracy and the share of predictions violating the injected knowledge",
        (
            Panel(
                "Test accuracy",
                (
                    Series("evaluate/accuracy", "KIFL, pooled test set"),
                    Series("evaluate/mean_client_accuracy", "KIFL, mean over clients", "variant"),
                ),
                "accuracy",
            ),
            Panel(
                "Predictions violating the knowledge (PoV; lower is better)",
                (Series("evaluate/pov", "KIFL, pooled test set"),),
                "share of predictions",
                target=0.0,
                target_label="no violation",
            ),
        ),
        key_metrics=("evaluate/accuracy", "evaluate/mean_client_accuracy", "evaluate/pov"),
    )
)
