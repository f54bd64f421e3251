"""The embedded simulated inference engine: the default target of a run, and the server the
tests use. See :class:`SimulatedServer`; the engine model is in ``engine`` and ``kvcache``,
the profiles (and how their numbers were derived) in ``profiles``, the what-if cache oracle in
``oracle``.
"""

from workloads.simulated_server.engine import Engine, RequestTruth
from workloads.simulated_server.oracle import OracleRequest, OracleTurn, WhatIfTurn, replay, what_if
from workloads.simulated_server.profiles import PROFILES, Faults, Profile, get_profile
from workloads.simulated_server.server import SimulatedServer

__all__ = [
    "PROFILES",
    "Engine",
    "Faults",
    "OracleRequest",
    "OracleTurn",
    "Profile",
    "RequestTruth",
    "SimulatedServer",
    "WhatIfTurn",
    "get_profile",
    "replay",
    "what_if",
]
