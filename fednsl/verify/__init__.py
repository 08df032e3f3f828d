"""Verified orchestration: the round protocols model-checked (explorer + SPIN)."""

from fednsl.verify.explorer import Report, Violation, explore, replay
from fednsl.verify.models import Centralised, Decentralised

__all__ = ["Centralised", "Decentralised", "Report", "Violation", "explore", "replay"]
