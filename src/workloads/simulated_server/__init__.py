"""The embedded simulated inference engine: the default target of a run, and the server the
tests use. See :class:`SimulatedServer`."""

from workloads.simulated_server.profiles import PROFILES, Profile, get_profile
from workloads.simulated_server.server import SimulatedServer

__all__ = ["PROFILES", "Profile", "SimulatedServer", "get_profile"]
