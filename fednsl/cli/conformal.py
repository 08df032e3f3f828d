"""``fednsl conformal``: ranks, exact coverage and Monte Carlo checks of federated split CP."""

from __future__ import annotations

import itertools
import json

import click

# numpy, scipy and rules.conformal load inside each subcommand, so that --help starts at once

FORMATS = click.Choice(["text", "json", "markdown"])


def _emit(rows: list[dict], fmt: str, columns: list[str], text_line) -> None:
    if fmt == "json":
        click.echo(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
    elif fmt == "markdown":
        click.echo("| " + " | ".join(columns) + " |")
        click.echo("|" + "---|" * len(columns))
        for r in rows:
            click.echo("| " + " | ".join(_cell(r.get(c), c) for c in columns) + " |")
    else:
        for r in rows:
            click.echo(text_line(r))


def _cell(v, column: str = "") -> str:
    if column == "alpha":
        return f"{v:g}"
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6f}"
    return str(v)


@click.group(
    name="conformal", help="Federated split conformal prediction (quantile of quantiles): ranks, coverage, simulation."
)
def command() -> None:
    pass


@command.command(
    "ranks",
    help="Choose the ranks (ell, kappa) with exact coverage >= 1-alpha and the smallest such coverage. "
    "Options may be repeated to print a grid.",
)
@click.option(
    "--n-cal",
    "n_cal",
    type=click.IntRange(min=1),
    multiple=True,
    required=True,
    help="Calibration scores per client (repeatable).",
)
@click.option(
    "--clients", type=click.IntRange(min=1), multiple=True, required=True, help="Clients in the cluster (repeatable)."
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    multiple=True,
    default=(0.1,),
    show_default=True,
    help="Miscoverage level alpha (repeatable); read as the decimal written (0.1 = 1/10).",
)
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
def ranks_cmd(n_cal: tuple[int, ...], clients: tuple[int, ...], alpha: tuple[float, ...], fmt: str) -> None:
    from rules.conformal import choose_ranks

    rows = []
    for n, m, a in itertools.product(n_cal, clients, alpha):
        rows.append(choose_ranks(n, m, a).to_dict())

    def line(r: dict) -> str:
        head = f"n_cal={r['n_cal']} clients={r['n_clients']} alpha={r['alpha']:g}: "
        if not r["feasible"]:
            return (
                head + f"INFEASIBLE: even ell=n_cal, kappa=clients covers only {r['coverage']:.6f} < {r['target']:g}; "
                f"needs >= {r['min_n_cal']} calibration points per client (interval would be infinite)"
            )
        return (
            head
            + f"ell={r['ell']} kappa={r['kappa']} coverage={r['coverage']:.6f} (>= {r['target']:g}; {r['method']}, "
            f"certified by {r['certified']}; sd of conditional coverage {r['level_sd']:.4f})"
        )

    _emit(
        rows, fmt, ["n_cal", "n_clients", "alpha", "ell", "kappa", "coverage", "level_sd", "method", "certified"], line
    )


@command.command("coverage", help="Exact coverage of given ranks (ell, kappa), e.g. ones hard-coded elsewhere.")
@click.option("--n-cal", "n_cal", type=click.IntRange(min=1), required=True, help="Calibration scores per client.")
@click.option("--clients", type=click.IntRange(min=1), required=True, help="Clients in the cluster.")
@click.option("--ell", type=click.IntRange(min=1), required=True, help="Client-side rank (ell-th smallest score).")
@click.option(
    "--kappa", type=click.IntRange(min=1), required=True, help="Server-side rank (kappa-th smallest local quantile)."
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Compare with 1-alpha and with the chosen ranks.",
)
@click.option(
    "--exact/--no-exact",
    default=False,
    show_default=True,
    help="Also compute the coverage in rational arithmetic (slow for n_cal*clients > 3000).",
)
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
def coverage_cmd(n_cal: int, clients: int, ell: int, kappa: int, alpha: float | None, exact: bool, fmt: str) -> None:
    from rules.conformal import choose_ranks, meets_target, qq_coverage, qq_coverage_fraction, qq_level_moments

    try:
        cov = qq_coverage(n_cal, clients, ell, kappa)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    _, sd = qq_level_moments(n_cal, clients, ell, kappa)
    row: dict = {"n_cal": n_cal, "n_clients": clients, "ell": ell, "kappa": kappa, "coverage": cov, "level_sd": sd}
    if exact:
        frac = qq_coverage_fraction(n_cal, clients, ell, kappa)
        row["coverage"] = float(frac)
        row["coverage_rational_digits"] = len(str(frac.denominator))
    if alpha is not None:
        best = choose_ranks(n_cal, clients, alpha)
        row.update(
            alpha=alpha,
            target=1 - alpha,
            meets_target=meets_target(n_cal, clients, ell, kappa, alpha),
            chosen_ell=best.ell,
            chosen_kappa=best.kappa,
            chosen_coverage=best.coverage,
        )

    def line(r: dict) -> str:
        s = f"n_cal={r['n_cal']} clients={r['n_clients']} ell={r['ell']} kappa={r['kappa']}: "
        s += f"coverage={r['coverage']:.6f}"
        if "coverage_rational_digits" in r:
            s += f" (rational, {r['coverage_rational_digits']}-digit denominator)"
        if "target" in r:
            verdict = "meets" if r["meets_target"] else "UNDER-COVERS"
            s += (
                f"; {verdict} target {r['target']:g}; chosen ranks ell={r['chosen_ell']} kappa={r['chosen_kappa']} "
                f"cover {r['chosen_coverage']:.6f}"
            )
        return s

    _emit([row], fmt, list(row), line)


@command.command(
    "simulate",
    help="Monte Carlo joint/per-step coverage on exchangeable synthetic residuals "
    "(one calibration + one test point per draw; Clopper-Pearson 95% CI).",
)
@click.option("--n-cal", "n_cal", type=click.IntRange(min=1), required=True, help="Calibration scores per client.")
@click.option("--clients", type=click.IntRange(min=1), required=True, help="Clients in the cluster.")
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.1,
    show_default=True,
    help="Miscoverage level.",
)
@click.option(
    "--horizon",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Forecast steps H (joint coverage over all of them).",
)
@click.option(
    "--n-nor",
    "n_nor",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Normalisation residuals per client (Eq 15).",
)
@click.option(
    "--scale-mode",
    type=click.Choice(["cluster", "client", "none"]),
    default="cluster",
    show_default=True,
    help="cluster: shared σ (exact guarantee); client: paper-literal per-client σ; none: σ = 1.",
)
@click.option(
    "--draws", type=click.IntRange(min=1), default=20_000, show_default=True, help="Independent calibration/test draws."
)
@click.option("--seed", type=int, default=0, show_default=True, help="numpy Generator seed.")
@click.option("--ell", type=click.IntRange(min=1), default=None, help="Override the client rank (needs --kappa).")
@click.option("--kappa", type=click.IntRange(min=1), default=None, help="Override the server rank (needs --ell).")
@click.option("--format", "fmt", type=FORMATS, default="text", show_default=True, help="Output format.")
def simulate_cmd(
    n_cal: int,
    clients: int,
    alpha: float,
    horizon: int,
    n_nor: int,
    scale_mode: str,
    draws: int,
    seed: int,
    ell: int | None,
    kappa: int | None,
    fmt: str,
) -> None:
    import numpy as np

    from rules.conformal.simulation import simulate_coverage

    if (ell is None) != (kappa is None):
        raise click.UsageError("give both --ell and --kappa, or neither")
    try:
        res = simulate_coverage(
            n_cal,
            clients,
            alpha,
            rng=np.random.default_rng(seed),
            horizon=horizon,
            n_nor=n_nor,
            draws=draws,
            scale_mode=scale_mode,
            ranks=None if ell is None or kappa is None else (ell, kappa),  # both or neither (checked above)
        )
    except ValueError as err:
        raise click.UsageError(str(err)) from err

    def line(r: dict) -> str:
        return (
            f"n_cal={r['n_cal']} clients={r['n_clients']} alpha={r['alpha']:g} H={r['horizon']} "
            f"scale={r['scale_mode']} ell={r['ell']} kappa={r['kappa']}: joint coverage {r['joint_coverage']:.4f} "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] over {r['draws']} draws (exact {r['exact_coverage']:.4f}); "
            f"per-step {r['per_step_coverage']:.4f}; width {r['width']:.3f}"
        )

    _emit(
        [res.to_dict()],
        fmt,
        [
            "n_cal",
            "n_clients",
            "alpha",
            "horizon",
            "scale_mode",
            "ell",
            "kappa",
            "joint_coverage",
            "ci_low",
            "ci_high",
            "exact_coverage",
            "per_step_coverage",
            "width",
        ],
        line,
    )
