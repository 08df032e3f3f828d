"""``fednsl verify``: model-check the round protocol (Python explorer, and SPIN when installed)."""

from __future__ import annotations

import json
from typing import Any

import click

PROPERTIES = {
    "centralised": [
        "P1 deadlock freedom",
        "P2 termination (no cycles)",
        "P3 round integrity",
        "P4 each update used once (no faults) / at most once",
        "P5 no message left in a channel",
        "P6 quorum before aggregation",
        "P7 all of these with <= F crashes and timers firing any time",
        "P8 only sampled clients counted",
        "P9 channel capacity",
        "P11 callback at most once",
    ],
    "decentralised": [
        "P1 deadlock freedom",
        "P2 termination (no cycles)",
        "P4 one reply per peer per step",
        "P5 no message left or discarded",
        "P10 steps never mix",
        "P11 callback once per peer",
    ],
}


@click.command(name="verify")
@click.option(
    "--mode",
    type=click.Choice(["centralised", "decentralised"]),
    default="centralised",
    show_default=True,
    help="Star (server + clients) or peer-to-peer protocol.",
)
@click.option("--nodes", type=int, default=3, show_default=True, help="Nodes including the server (centralised).")
@click.option("--rounds", type=int, default=2, show_default=True, help="Rounds (steps in decentralised mode).")
@click.option(
    "--crashes", type=int, default=0, show_default=True, help="Clients that may crash-stop at any moment (centralised)."
)
@click.option("--quorum", type=int, default=1, show_default=True, help="Replies needed to aggregate.")
@click.option("--no-timeouts", is_flag=True, help="Broken variant: no timer (a crash then deadlocks the server).")
@click.option("--no-tags", is_flag=True, help="Broken variant: messages carry no round tag.")
@click.option("--no-por", is_flag=True, help="Disable the partial-order reduction (slower, same verdict).")
@click.option(
    "--spin/--no-spin",
    "use_spin",
    default=None,
    help="Also check the generated Promela model with SPIN (default: when spin is installed; centralised mode only).",
)
@click.option(
    "--max-states", type=int, default=2_000_000, show_default=True, help="Stop the explorer after this many states."
)
@click.option("--promela", type=click.Path(dir_okay=False), default=None, help="Write the Promela model to this file.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def command(
    mode: str,
    nodes: int,
    rounds: int,
    crashes: int,
    quorum: int,
    no_timeouts: bool,
    no_tags: bool,
    no_por: bool,
    use_spin: bool | None,
    max_states: int,
    promela: str | None,
    fmt: str,
) -> None:
    """Explore every interleaving of the round protocol and check properties P1-P11.

    Exits with status 1 and prints a counterexample trace when a property fails.
    """
    from fednsl.verify import Centralised, Decentralised, explore
    from fednsl.verify.promela import run_spin, spin_available, to_promela

    if use_spin and not spin_available():  # before exploring, which can take a while
        from fednsl.cli.errors import BadInput

        raise BadInput(
            "--spin: the spin and gcc programs are needed but not found on PATH "
            "(apt-get install -y spin gcc), or leave out --spin"
        )
    model: Centralised | Decentralised
    if mode == "centralised":
        model = Centralised(
            nodes, rounds, crashes=crashes, timeouts=not no_timeouts, tags=not no_tags, quorum=quorum, por=not no_por
        )
    else:
        model = Decentralised(nodes, rounds, tags=not no_tags)
    rep = explore(model, max_states=max_states)
    out: dict[str, Any] = {
        "mode": mode,
        "model": repr(model),
        "properties": PROPERTIES[mode],
        "states": rep.states,
        "transitions": rep.transitions,
        "seconds": round(rep.seconds, 3),
        "complete": rep.complete,
        "ok": rep.ok,
        "violations": [{"property": v.prop, "detail": v.detail, "trace": v.trace} for v in rep.violations],
    }
    if promela and isinstance(model, Centralised):  # mode == "centralised"
        with open(promela, "w") as f:
            f.write(to_promela(model))
    if use_spin is None:
        use_spin = spin_available() and mode == "centralised"
    if use_spin and isinstance(model, Centralised):  # mode == "centralised"
        sp = run_spin(model)
        out["spin"] = {"errors": sp.errors, "states": sp.states, "seconds": round(sp.seconds, 2)}
    if fmt == "json":
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"{mode} protocol: {model!r}")
        click.echo("properties: " + "; ".join(PROPERTIES[mode]))
        click.echo(
            f"explorer: {rep.states} states, {rep.transitions} transitions, {rep.seconds:.2f} s"
            + ("" if rep.complete else f" (stopped at --max-states {max_states}: incomplete)")
        )
        if "spin" in out:
            s = out["spin"]
            click.echo(f"spin: {s['states']} states, {s['errors']} errors, {s['seconds']} s")
        for v in rep.violations:
            click.echo(f"VIOLATED {v.prop}: {v.detail}")
            click.echo("counterexample:")
            for i, step in enumerate(v.trace, 1):
                click.echo(f"  {i:3d}. {step}")
        click.echo("all properties hold" if rep.ok and out.get("spin", {}).get("errors", 0) == 0 else "FAILED")
    if not rep.ok or out.get("spin", {}).get("errors", 0):
        raise SystemExit(1)
