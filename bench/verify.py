"""States explored and seconds for model-checking the round protocols (README table).

Python explorer (symmetry + partial-order reduction) and SPIN (no reduction beyond its own
partial-order reduction) side by side on the same generated model.

    python -m bench.verify [--max-states 3000000] [--no-spin]
"""

from __future__ import annotations

import argparse

from bench._common import write_result
from fednsl.verify import Centralised, Decentralised, explore
from fednsl.verify.promela import run_spin, spin_available

CASES = [
    Centralised(3, 2, crashes=1), Centralised(3, 3, crashes=1),
    Centralised(5, 2, crashes=1), Centralised(5, 3, crashes=1),
    Centralised(8, 2, crashes=1), Centralised(8, 3, crashes=0),
    Decentralised(3, 3),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-states", type=int, default=3_000_000, help="explorer state limit per case")
    ap.add_argument("--no-spin", action="store_true", help="skip SPIN")
    ap.add_argument("--spin-max-nodes", type=int, default=3, help="run SPIN only up to this many nodes")
    args = ap.parse_args()
    rows = []
    for m in CASES:
        rep = explore(m, max_states=args.max_states)
        row = {"model": repr(m), "explorer_states": rep.states, "explorer_s": round(rep.seconds, 2),
               "complete": rep.complete, "ok": rep.ok}
        if not args.no_spin and spin_available() and isinstance(m, Centralised) and m.nodes <= args.spin_max_nodes:
            sp = run_spin(m)
            row.update(spin_states=sp.states, spin_s=round(sp.seconds, 2), spin_ok=sp.ok)
        rows.append(row)
        print(row, flush=True)
    print("results:", write_result("verify", {"rows": rows}))


if __name__ == "__main__":
    main()
