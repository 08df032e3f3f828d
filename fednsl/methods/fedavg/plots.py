"""FedAvg's figures: test accuracy and loss on the blobs task, and the numeric experiments (Fig. 2 a1–a6)."""

from __future__ import annotations

from fednsl.plots import NUMERIC_KEYS, Panel, PlotSpec, Series, numeric_panels, register_plot

BLOBS = register_plot("fedavg")(
    PlotSpec(
        "fedavg_accuracy",
        "FedAvg: the global model's test accuracy rises and its loss falls over rounds",
        (
            Panel("Test accuracy", (Series("evaluate/accuracy", "FedAvg"),), "accuracy"),
            Panel(
                "Loss",
                (Series("evaluate/loss", "FedAvg"), Series("train/train_loss", "FedAvg, training", "variant")),
                "cross-entropy",
            ),
        ),
        key_metrics=("evaluate/accuracy", "evaluate/loss", "train/train_loss"),
    )
)

NUMERIC = register_plot("fedavg-numeric")(
    PlotSpec(
        "fedavg_numeric_accuracy",
        "FedAvg (numeric baseline): one global model; accuracy on unseen classes and on relabelled training data",
        numeric_panels("FedAvg"),
        key_metrics=NUMERIC_KEYS,
    )
)
