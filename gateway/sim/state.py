"""Everything one simulator instance remembers between requests."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.sim.anthropic_cache import BreakpointCache
from gateway.sim.capacity import Seats
from gateway.sim.config import SimConfig
from gateway.sim.faults import FaultBook
from gateway.sim.prefix_cache import PrefixCache
from gateway.sim.records import RequestLog


@dataclass
class SimState:
    """The configuration plus the caches, request log and armed faults."""

    config: SimConfig
    initial_config: SimConfig
    prefix_cache: PrefixCache
    breakpoints: BreakpointCache
    log: RequestLog
    faults: FaultBook
    seats: Seats

    @classmethod
    def build(cls, config: SimConfig) -> SimState:
        """Return fresh, empty state for a configuration."""
        return cls(
            config=config,
            initial_config=config,
            prefix_cache=PrefixCache(config.block_size, config.prefix_cache_blocks),
            breakpoints=BreakpointCache(),
            log=RequestLog(config.request_log_size),
            faults=FaultBook(),
            seats=Seats(config.max_num_seqs, config.kv_cache_blocks, config.block_size),
        )

    def reset(self) -> None:
        """Forget requests, faults, both caches and runtime config changes."""
        self.config = self.initial_config
        self.log.clear()
        self.faults.clear()
        self.prefix_cache.clear()
        self.breakpoints.clear()
