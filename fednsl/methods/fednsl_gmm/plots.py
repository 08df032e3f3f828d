"""FedNSL-GMM's figure: the numeric experiments (Fig. 2 a1–a6) — accuracy on unseen-class test sets per
heterogeneity level and training accuracy against the true and the given labels."""

from __future__ import annotations

from fednsl.plots import NUMERIC_KEYS, Panel, PlotSpec, Series, numeric_panels, register_plot

SPEC = register_plot("fednsl-gmm")(
    PlotSpec(
        "fednsl_gmm_accuracy",
        "FedNSL (GMM rule posterior): accuracy on unseen classes and training accuracy under relabelling",
        numeric_panels(
            "FedNSL-GMM",
            (
                Panel(
                    "Training objective",
                    (Series("train/train_loss", "loss"), Series("train/train_kl", "KL to the rule prior", "variant")),
                    "",
                ),
            ),
        ),
        key_metrics=NUMERIC_KEYS,
    )
)
