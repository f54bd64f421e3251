"""The embedded simulated inference engine: the default target of a run, and the server the
tests use. See :class:`SimulatedServer`; the engine model is in ``engine`` (its paged KV
cache is :mod:`workloads.core.kvcache`, shared with the what-if oracle), the profiles (and
how their numbers were derived) in ``profiles``.
"""

from workloads.servers.simulated.engine import Engine, RequestTruth
from workloads.servers.simulated.profiles import PROFILES, Faults, Profile, get_profile
from workloads.servers.simulated.server import SimulatedServer

__all__ = [
    "PROFILES",
    "Engine",
    "Faults",
    "Profile",
    "RequestTruth",
    "SimulatedServer",
    "get_profile",
]
