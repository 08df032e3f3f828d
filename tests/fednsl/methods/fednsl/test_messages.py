"""FedNSL's wire formats (fednsl.methods.fednsl.messages): one definition read by server and client."""

from __future__ import annotations

import pytest

from fednsl.methods.fednsl.config import FedNSLConfig
from fednsl.methods.fednsl.messages import (
    SCORER_KEYS,
    ScorerOptions,
    scorer_config,
    scorer_options_from,
)


def test_scorer_config_carries_every_config_option_with_plain_types() -> None:
    cfg = FedNSLConfig(kl_weight=1, kl_direction="forward", prior_source="mixed", count_correction=True,
                       pass_through=True, posterior_instances="positive", kl_scale="per_triple",
                       scorer_optimizer="adam", scorer_tol=1e-3, scorer_steps=7, scorer_lr=1,
                       scorer_weight_decay=0.5, scorer_bias_init="uniform", transfer="prior", transfer_top=2)
    sent = scorer_config(cfg.scorer_options())
    expected = {"kl_weight": 1.0, "kl_direction": "forward", "prior_source": "mixed",
                "count_correction": True, "pass_through": True, "posterior_instances": "positive",
                "kl_scale": "per_triple", "optimizer": "adam", "tol": 1e-3, "steps": 7,
                "lr": 1.0, "weight_decay": 0.5, "bias_init": "uniform", "transfer": "prior", "transfer_top": 2}
    assert sent == expected and list(sent) == list(expected)
    assert [type(v) for v in sent.values()] == [type(v) for v in expected.values()]
    assert SCORER_KEYS == tuple(expected)


def test_client_reads_what_the_server_sends_and_keeps_its_local_options() -> None:
    sent = ScorerOptions(kl_weight=0.3, steps=9, bias_init="uniform", transfer_top=1)
    local = ScorerOptions(transfer_steps=17)
    got = scorer_options_from(scorer_config(sent), local)
    assert got == ScorerOptions(kl_weight=0.3, steps=9, bias_init="uniform", transfer_top=1, transfer_steps=17)
    assert scorer_options_from({}, local) == local


def test_published_transfer_needs_no_pass_through_and_bad_choices_name_the_option() -> None:
    with pytest.raises(ValueError, match="pass_through: false"):
        FedNSLConfig(transfer="published", pass_through=True)
    with pytest.raises(ValueError, match="method_kwargs.transfer"):
        FedNSLConfig(transfer="gossip")
    with pytest.raises(ValueError, match="method_kwargs.kl_scale"):
        FedNSLConfig(kl_scale="per_doc")
    defaults = FedNSLConfig().scorer_options()
    assert (defaults.prior_source, defaults.posterior_instances, defaults.pass_through, defaults.kl_scale,
            defaults.optimizer) == ("renormalised", "all", False, "per_cell", "lbfgs")
